"""Headless Chromium (Debian's ``chromium`` package) for the dashboard: a screenshot, and the DOM
after the page's scripts ran, so a test can check that the charts really drew.

Every call gets a fresh profile directory and switches off everything that would reach the network
(the machines this runs on have none) or leave state behind.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app.errors import BrowserUnavailableError

CHROMIUM_NAMES = ("chromium", "chromium-browser")
WINDOW_SIZE = (1400, 2000)
VIRTUAL_TIME_BUDGET_MS = 5000


def find_chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise BrowserUnavailableError(
        "chromium not found on PATH: install Debian's package (apt-get install chromium, "
        "or `make system-deps`)"
    )


def chromium_args(profile_dir: Path, window: tuple[int, int] = WINDOW_SIZE) -> list[str]:
    return [
        "--headless",
        "--no-sandbox",  # containers and CI run as root, where the sandbox cannot start
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile_dir}",
        f"--window-size={window[0]},{window[1]}",
        f"--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}",
    ]


def _run(extra: list[str], url: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    binary = find_chromium()
    with tempfile.TemporaryDirectory(prefix="offset-audit-chromium-") as profile:
        cmd = [binary, *chromium_args(Path(profile)), *extra, url]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise BrowserUnavailableError(f"chromium did not finish within {timeout_s}s") from exc


def screenshot(html_path: Path, png_path: Path, timeout_s: float = 90.0) -> Path:
    """Render ``html_path`` and write a PNG of the window to ``png_path``."""
    png_path = png_path.resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    png_path.unlink(missing_ok=True)
    proc = _run([f"--screenshot={png_path}"], html_path.resolve().as_uri(), timeout_s)
    if not png_path.is_file() or png_path.stat().st_size == 0:
        raise BrowserUnavailableError(
            f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr.strip()[-800:]}"
        )
    return png_path


def dump_dom(html_path: Path, timeout_s: float = 90.0) -> str:
    """The page's DOM serialized after its scripts ran (within the virtual time budget)."""
    proc = _run(["--dump-dom"], html_path.resolve().as_uri(), timeout_s)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise BrowserUnavailableError(
            f"chromium --dump-dom failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}"
        )
    return proc.stdout


@dataclass(frozen=True)
class DomCheck:
    charts_drawn: int
    charts: dict[str, int]  # chart id -> drawn SVG shapes (rect, line, text) in it
    errors: dict[str, str]  # chart id -> the error the renderer caught


_CHART = re.compile(r'<div class="chart" id="chart-([\w-]+)"[^>]*>(.*?)</div>\s*</section>', re.S)
_ERROR = re.compile(r'id="chart-([\w-]+)"[^>]*data-error="([^"]*)"')
_DRAWN = re.compile(r'data-charts-drawn="(\d+)"')


def check_dom(dom: str) -> DomCheck:
    """What the dashboard's script left in the DOM: the drawn-charts marker and shapes per chart."""
    marker = _DRAWN.search(dom)
    charts = {
        cid: len(re.findall(r"<(?:rect|line|text)\b", body)) if "<svg" in body else 0
        for cid, body in _CHART.findall(dom)
    }
    errors = dict(_ERROR.findall(dom))
    return DomCheck(int(marker.group(1)) if marker else 0, charts, errors)
