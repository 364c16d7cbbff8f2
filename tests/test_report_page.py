"""The demo's report page as users look at it: all three scenarios on it, every image there, and, in a headless
browser (Debian's ``chromium``; skipped where it is absent), every image loads and nothing overflows the window.

The browser test keeps a screenshot of the page: in ``$ASYNCRL_ARTIFACTS`` when set (``.ci/run`` sets it), else
in the test's temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from asyncrl.experiments.demo import DEMO_SCENARIOS
from tests.demo_page import demo_page

pytest.importorskip("matplotlib")

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WIDTHS = (1280, 800)  # a laptop's window and a narrow one
BROWSER_TIMEOUT_S = 120  # generous: a cold start of chromium on a busy machine (not a figure being measured)
CHECK = """
<script>
window.addEventListener("load", () => {
  const root = document.documentElement;
  const images = [...document.images];
  const broken = images.filter((image) => !(image.complete && image.naturalWidth > 0)).map((image) => image.src);
  const wide = [...document.body.querySelectorAll("*")]
    .filter((element) => element.getBoundingClientRect().right > root.clientWidth + 1)
    .map((element) => element.tagName + " " + (element.getAttribute("src") || element.textContent.slice(0, 60)));
  const out = document.createElement("pre");
  out.id = "asyncrl-check";
  out.textContent = JSON.stringify({images: images.length, broken, wide, scroll: root.scrollWidth, width: root.clientWidth});
  document.body.appendChild(out);
});
</script>
"""


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_page(tmp_path_factory.mktemp("demo"))


@pytest.mark.slow
def test_the_demo_page_shows_every_scenario_and_its_figures(page: Path) -> None:
    """Only cpu-timing was on it."""
    text = page.read_text()
    for name in DEMO_SCENARIOS:
        assert f"<h2>{name}: predicted against measured</h2>" in text
        assert f"<h2>{name}: sync against " in text
        assert f"src='{name}/timeline.png'" in text and f"src='{name}/sync-vs-async/timeline.png'" in text
    sources = re.findall(r"<img src='([^']+)'", text)
    assert len(sources) >= 6 * 3  # timeline, staleness, throughput at least, per section
    for source in sources:
        assert (page.parent / source).stat().st_size > 0, source
    for link in re.findall(r"<a href='([^']+)'", text):
        assert (page.parent / link).is_file(), link


def browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


@pytest.mark.skipif(browser() is None, reason="no chromium (apt-get install chromium; .ci/run installs it)")
@pytest.mark.parametrize("width", WIDTHS)
def test_in_a_browser_every_image_loads_and_nothing_overflows(page: Path, width: int, tmp_path: Path) -> None:
    checked = page.with_name(f"check-{width}.html")
    checked.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    dom = _chromium(["--dump-dom", checked.as_uri()], width, 900)
    found = re.search(r'<pre id="asyncrl-check">(.*?)</pre>', dom, re.DOTALL)
    assert found, dom[-2000:]
    result = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<"))
    assert result["images"] >= 18 and result["broken"] == [], result
    assert result["scroll"] <= result["width"] and result["wide"] == [], result
    artifacts = Path(os.environ.get("ASYNCRL_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    screenshot = artifacts / f"demo-report-{width}.png"
    _chromium([f"--screenshot={screenshot}", page.as_uri()], width, 4000)
    assert screenshot.stat().st_size > 10_000


def _chromium(arguments: list[str], width: int, height: int) -> str:
    command = [
        str(browser()),
        "--headless",
        "--no-sandbox",  # as root in a container
        "--disable-gpu",
        "--hide-scrollbars",
        "--allow-file-access-from-files",
        f"--window-size={width},{height}",
        "--virtual-time-budget=10000",  # every image loaded and the load handler run before the dump
        *arguments,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
