"""The forensic report in a real browser: Debian chromium through Playwright opens the file
written by `report.write` (file://, JavaScript off), every section renders, nothing is
fetched, nothing overflows; the full-page screenshot is docs/report.png."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chronos_git import report
from chronos_git.service import Chronos
from chronos_git.settings import Settings

try:
    from playwright.sync_api import sync_playwright
    _PW_ERROR = None
except ImportError as exc:          # pragma: no cover - depends on the environment
    sync_playwright = None
    _PW_ERROR = str(exc)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "report.png"
HEADINGS = ("1. Integrity and journal head", "2. Unresolved, recovered and resolved operations",
            "3. Timeline of events", "4. Checkpoints per workspace", "5. Store size and retention",
            "6. Last wind tunnel run")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (Debian package `chromium`)"),
    pytest.mark.skipif(sync_playwright is None, reason=f"playwright is not installed ({_PW_ERROR})"),
]


def shrink(png: Path) -> None:
    """A palette PNG (text and flat colours survive): a third of the size in the repository.
    Pillow comes with hermes-agent; without it the screenshot stays as chromium made it."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as im:
        small = im.convert("RGB").quantize(128)
    small.save(png, optimize=True)


@pytest.fixture
def report_file(ws, cli, store_dir, tmp_path) -> Path:
    """A store with something in every section, made by the real CLI."""
    def ok(*args, **kw):
        r = cli("--json", *args, cwd=ws, **kw)
        assert r.rc == 0, (args, r.stdout, r.stderr)
        return r.json

    ok("snapshot", "-m", "<script>alert(1)</script> before the agent ran")
    with open(os.path.join(os.fsencode(ws), b"caf\xe9.txt"), "wb") as fh:
        fh.write(b"accent\n")
    ok("snapshot", "-m", "a very long description " + "x" * 2_000)
    ok("run", "--tool", "terminal", "--", "sh", "-c", "echo built > build.log")
    r = cli("--json", "run", "--", "sh", "-c", "echo deployed > deploy.log", cwd=ws, fault="after_intent")
    assert r.rc == -9, r.stderr
    op = ok("journal", "status")["unresolved"][0]["operation_id"]
    ok("journal", "resolve", op, "--outcome", "not_applied", "--evidence", "deploy.log absent; nothing deployed")
    r = cli("--json", "write", "src/main.py", "--content", "print('new')\n", cwd=ws, fault="after_intent")
    assert r.rc == -9, r.stderr
    ok("journal", "recover", "--replay")
    ok("restore", "2")
    (store_dir / "chronos" / "windtunnel-last.json").write_text(json.dumps({
        "finished_at": "2026-01-02T03:04:05Z", "quick": True, "suites": {
            "crash-points": {"runs": 9, "ok": 9, "breaches": []},
            "hostile-names": {"runs": 5, "ok": 4, "breaches": [{"case": "fifo", "detail": "<b>blocked</b> read"}]}}}))
    return report.write(Chronos.get(store_dir, Settings(), create=False), tmp_path / "report.html")


def test_the_report_renders_without_javascript_and_fetches_nothing(report_file):
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(java_script_enabled=False, viewport={"width": 1100, "height": 900})
            page = context.new_page()
            requests: list[str] = []
            page.on("request", lambda req: requests.append(req.url))
            page.goto(report_file.as_uri())
            assert page.title().startswith("chronos-git report · INTEGRITY OK")
            verdict = page.locator("#verdict")
            assert verdict.is_visible() and verdict.inner_text() == "INTEGRITY OK"
            for heading in HEADINGS:
                assert page.get_by_role("heading", name=heading, exact=True).is_visible(), heading
            assert page.get_by_role("link", name="Timeline of events").get_attribute("href") == "#timeline"
            assert page.get_by_text("<script>alert(1)</script> before the agent ran").count() == 1   # as text
            assert page.get_by_text("caf\\xe9.txt").count() >= 1
            # nothing but the file itself was requested, and nothing is wider than the window
            assert requests == [report_file.as_uri()]
            width = page.locator("body").bounding_box()["width"]
            for table in page.locator("table").all():
                assert table.bounding_box()["width"] <= width + 1
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    shrink(SCREENSHOT)
    data = SCREENSHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) < 700_000, f"docs/report.png is {len(data)} bytes"
