"""Generation: the continuous-batching engine, its KV cache, the models and tokenizers."""
