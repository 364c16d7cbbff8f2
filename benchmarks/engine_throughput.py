"""Tokens per second of ``ContinuousBatchingEngine`` versus ``model.generate()`` on long-tailed rollout lengths.

Workload: 64 requests with random prompts (8 to 32 tokens) and forced completion lengths drawn from a lognormal
(median 32, sigma 1.0, capped at 256), the ``tiny`` preset on CPU, fixed seeds, sampling at temperature 1.

* ``generate()`` runs fixed batches of ``max_batch`` requests; each batch runs until its longest member
  (``min_new_tokens = max_new_tokens = longest``, since lengths are forced). Its raw rate counts every token it
  produced; its useful rate counts only the tokens the requests needed.
* The engine admits a waiting request as soon as a row frees up, so every token it produces is useful.

Both run in the same process, after a warm-up of each, on the same requests. Run::

    .venv/bin/python benchmarks/engine_throughput.py [--skip-generate-batch]

Why not transformers' own continuous batching (``generate_batch`` / ``init_continuous_batching``)? It runs on CPU
(warning that psutil is missing) but is built for GPUs: a paged cache, a background thread and CUDA-graph warm-up.
Measured on this machine (2 CPU cores, tiny preset, 16 requests x 32 tokens, greedy): the first call took about
8-9 s (manager start-up and warm-up, about 60 tokens/s overall); with a persistent manager it then reached about
930 tokens/s, against about 13,000 tokens/s for this engine on the same requests (about 14x). It also takes a single
``max_new_tokens`` for all requests (no per-request forced lengths) and steps in its own thread, so there is no
point between steps at which to load new weights and record which version produced each token. The last section
of this script measures it again (greedy, uniform lengths, manager start-up excluded) unless skipped.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import torch
from asyncrl.executor.generation.engine import ContinuousBatchingEngine, Request, generate_all
from asyncrl.executor.generation.models import build_model
from transformers import GenerationConfig, PreTrainedModel

PRESET = "tiny"
SEED = 0
REQUESTS = 64
MAX_BATCH = 16
MEDIAN_LENGTH = 32
LENGTH_SIGMA = 1.0
MAX_LENGTH = 256
PROMPT_LENGTHS = (8, 32)
PAD_TOKEN_ID = 0


@dataclass(frozen=True)
class Measurement:
    name: str
    seconds: float
    produced_tokens: int  # every token generated, including those past a request's forced length
    useful_tokens: int  # tokens the requests asked for

    @property
    def produced_per_s(self) -> float:
        return self.produced_tokens / self.seconds

    @property
    def useful_per_s(self) -> float:
        return self.useful_tokens / self.seconds


def make_requests(vocab: int, count: int, seed: int) -> list[Request]:
    """Random prompts with long-tailed forced completion lengths."""
    rng = np.random.default_rng(seed)
    lengths = rng.lognormal(np.log(MEDIAN_LENGTH), LENGTH_SIGMA, size=count).round().clip(1, MAX_LENGTH).astype(int)
    prompt_lengths = rng.integers(PROMPT_LENGTHS[0], PROMPT_LENGTHS[1] + 1, size=count)
    return [
        Request(
            id=index,
            prompt=rng.integers(1, vocab, size=int(prompt_length)).tolist(),
            max_new_tokens=MAX_LENGTH,
            forced_length=int(length),
        )
        for index, (length, prompt_length) in enumerate(zip(lengths, prompt_lengths, strict=True))
    ]


def run_engine(model: PreTrainedModel, requests: list[Request], greedy: bool = False) -> Measurement:
    engine = ContinuousBatchingEngine(
        model,
        max_batch=MAX_BATCH,
        eos_token_id=None,
        pad_token_id=PAD_TOKEN_ID,
        greedy=greedy,
        seed=SEED,
        device=model.device,
    )
    started = time.perf_counter()
    rollouts = generate_all(engine, requests)
    seconds = time.perf_counter() - started
    produced = sum(len(rollout.tokens) for rollout in rollouts)
    return Measurement("ContinuousBatchingEngine", seconds, produced, produced)


def run_generate(model: PreTrainedModel, requests: list[Request]) -> Measurement:
    """Fixed batches of MAX_BATCH requests, left-padded, each running until its longest member."""
    torch.manual_seed(SEED)
    produced = useful = 0
    started = time.perf_counter()
    for first in range(0, len(requests), MAX_BATCH):
        batch = requests[first : first + MAX_BATCH]
        longest = max(request.forced_length or request.max_new_tokens for request in batch)
        ids, mask = left_padded([request.prompt for request in batch])
        with torch.inference_mode():
            output = model.generate(
                ids.to(model.device), attention_mask=mask.to(model.device), generation_config=sampling_config(longest)
            )
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        produced += (output.shape[1] - ids.shape[1]) * len(batch)
        useful += sum(request.forced_length or request.max_new_tokens for request in batch)
    return Measurement("model.generate()", time.perf_counter() - started, produced, useful)


def sampling_config(new_tokens: int) -> GenerationConfig:
    return GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=None,
        top_p=None,
        min_new_tokens=new_tokens,
        max_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=PAD_TOKEN_ID,
    )


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(prompt) for prompt in prompts)
    ids = torch.tensor([[PAD_TOKEN_ID] * (width - len(prompt)) + prompt for prompt in prompts])
    mask = torch.tensor([[0] * (width - len(prompt)) + [1] * len(prompt) for prompt in prompts])
    return ids, mask


def run_generate_batch(model: PreTrainedModel, prompts: list[list[int]], new_tokens: int) -> Measurement:
    """transformers' continuous batching, greedy, uniform lengths, after one untimed call to start the manager."""
    config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, eos_token_id=-1, pad_token_id=PAD_TOKEN_ID)
    model.generate_batch(prompts, generation_config=config, persistent_manager=True)
    started = time.perf_counter()
    outputs = model.generate_batch(prompts, generation_config=config, persistent_manager=True, warmup=False)
    seconds = time.perf_counter() - started
    model.destroy_cached_continuous_batching_manager()
    produced = sum(len(output.generated_tokens) for output in outputs.values())
    return Measurement("generate_batch()", seconds, produced, produced)


def report(measurement: Measurement) -> None:
    print(
        f"{measurement.name:26s} {measurement.seconds:7.2f} s  produced {measurement.produced_tokens:6d} tokens "
        f"({measurement.produced_per_s:8.0f}/s)  useful {measurement.useful_tokens:6d} ({measurement.useful_per_s:8.0f}/s)"
    )


def compare_on_long_tail(model: PreTrainedModel, repeats: int) -> None:
    requests = make_requests(model.config.vocab_size, REQUESTS, SEED)
    warmup = make_requests(model.config.vocab_size, MAX_BATCH, SEED + 1)
    run_engine(model, warmup)
    run_generate(model, warmup)
    lengths = [request.forced_length for request in requests]
    print(
        f"{REQUESTS} requests, max_batch {MAX_BATCH}, forced lengths median {int(np.median(lengths))}, "
        f"max {max(lengths)}, sum {sum(lengths)}; best of {repeats} interleaved runs"
    )
    generate_runs, engine_runs = [], []
    for _ in range(repeats):
        generate_runs.append(run_generate(model, requests))
        engine_runs.append(run_engine(model, requests))
    generate = min(generate_runs, key=lambda run: run.seconds)
    engine = min(engine_runs, key=lambda run: run.seconds)
    report(generate)
    report(engine)
    print(f"ratio engine / generate(): produced tokens/s {engine.produced_per_s / generate.produced_per_s:.2f}x")
    print(f"ratio engine / generate(): useful tokens/s   {engine.useful_per_s / generate.useful_per_s:.2f}x")


def compare_with_generate_batch(model: PreTrainedModel, repeats: int) -> None:
    prompts = [request.prompt for request in make_requests(model.config.vocab_size, MAX_BATCH, SEED + 2)]
    uniform = [Request(index, prompt, MEDIAN_LENGTH, MEDIAN_LENGTH) for index, prompt in enumerate(prompts)]
    print(f"uniform lengths: {len(prompts)} requests x {MEDIAN_LENGTH} tokens, greedy (engine: best of {repeats})")
    builtin = run_generate_batch(model, prompts, MEDIAN_LENGTH)
    engine = min((run_engine(model, uniform, greedy=True) for _ in range(repeats)), key=lambda run: run.seconds)
    report(builtin)
    report(engine)
    print(f"ratio engine / generate_batch(): {engine.produced_per_s / builtin.produced_per_s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-generate-batch", action="store_true", help="skip transformers' continuous batching")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each; the fastest counts")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    model = build_model(PRESET, seed=SEED).to(arguments.device)
    compare_on_long_tail(model, arguments.repeats)
    if not arguments.skip_generate_batch:
        compare_with_generate_batch(model, arguments.repeats)


if __name__ == "__main__":
    main()
