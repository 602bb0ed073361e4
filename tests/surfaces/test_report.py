"""The forensic report: a real store made by the real CLI in other processes (checkpoints,
a restore, crashed calls settled by evidence and by an operator, hostile strings, a name
that is not UTF-8), rendered by `report.build` and served at GET /report over real HTTP."""
from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from chronos_git import report
from chronos_git.api import create_app
from chronos_git.service import Chronos
from chronos_git.settings import Settings
from chronos_git.journal_refs.witness import read_doc, write_doc
from chronos_git.service.timemachine import MAX_LABEL
from support.helpers import git
from support.server import Server

TOKEN = "report-test-token"
PREFIX = "/api/plugins/chronos-git"
SCRIPT = "<script>alert(1)</script>"
TOOL = "<svg onload=alert(3)>\u202egnp.exe"          # and a bidi override
LONG = "L" * MAX_LABEL                             # the longest label a checkpoint may have
CAFE = b"caf\xe9.txt"
SECTIONS = ("integrity", "operations", "timeline", "checkpoints", "store", "windtunnel")
WINDTUNNEL = {"finished_at": "2026-01-02T03:04:05Z", "quick": True, "suites": {
    "crash-points": {"runs": 12, "ok": 11, "breaches": [{"point": "mid_append", "detail": "<b>boom</b>"}]},
    "restores": {"runs": 4, "ok": 4, "breaches": []}}}


def service(store_dir) -> Chronos:
    return Chronos.get(store_dir, Settings(), create=False)


def files_of(store_dir: Path) -> dict:
    """Every file of the store and its witness, but `journal verify`'s own records of when it
    last verified the chain, the checkpoints it names and the operator acts' signatures
    (chronos/journal-verified.json, checkpoints-verified.json, operator-acts.json, rewritten by
    every verify)."""
    out = {"witness": store_dir.with_name("store.journal-witness.json").read_bytes()}
    for root, _dirs, files in os.walk(store_dir):
        for f in files:
            p = Path(root, f)
            if p not in (store_dir / "chronos" / "journal-verified.json",
                         store_dir / "chronos" / "checkpoints-verified.json",
                         store_dir / "chronos" / "operator-acts.json"):
                out[str(p.relative_to(store_dir))] = (p.stat().st_mode, p.read_bytes())
    return out


def verdict(html: str) -> tuple[str, str]:
    m = re.search(r'<h1 id="verdict" class="verdict" data-level="(\w+)">([^<]*)</h1>', html)
    assert m, "no verdict heading"
    return m.group(1), m.group(2)


class Tags(HTMLParser):
    """Every real tag and attribute of the document (escaped text is not a tag)."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.style = ""
        self._in_style = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.style += data


@pytest.fixture
def small(ws, cli):
    """A checkpoint and one protected call: a journal to tamper with."""
    assert cli("snapshot", "-m", "start", cwd=ws).rc == 0
    assert cli("run", "--", "true", cwd=ws).rc == 0


@pytest.fixture
def history(ws, cli, store_dir):
    """Checkpoints (one with a script as its message, one with a 10,000-character one, one
    holding a file whose name is not UTF-8), a shell call, a crashed shell call resolved by
    an operator, a crashed write settled by evidence and replayed, a restore, a wind tunnel
    result."""
    def ok(*args, **kw):
        r = cli("--json", *args, cwd=ws, **kw)
        assert r.rc == 0, (args, r.stdout, r.stderr)
        return r.json

    first = ok("snapshot", "-m", SCRIPT)["checkpoint"]
    with open(os.path.join(os.fsencode(ws), CAFE), "wb") as fh:
        fh.write(b"accent\n")
    ok("snapshot", "-m", LONG)
    ok("run", "--tool", TOOL, "--", "sh", "-c", "echo b > b.txt")
    crashed = cli("--json", "run", "--", "sh", "-c", "echo c > c.txt", cwd=ws, fault="after_intent")
    assert crashed.rc == -9, crashed.stderr
    op = ok("journal", "status")["unresolved"][0]["operation_id"]
    ok("journal", "resolve", op, "--outcome", "not_applied", "--evidence", "<i>c.txt</i> was never written")
    crashed = cli("--json", "write", os.fsdecode(CAFE), "--content", "new", cwd=ws, fault="after_intent")
    assert crashed.rc == -9, crashed.stderr
    replay = ok("journal", "recover", "--replay")
    assert replay["replayed"], replay
    ok("restore", first)
    (store_dir / "chronos" / "windtunnel-last.json").write_text(json.dumps(WINDTUNNEL))
    return {"ws": ws, "first": first, "resolved": op, "replayed": replay["replayed"][0]["operation_id"]}


@pytest.mark.process
def test_the_report_is_one_safe_document_with_every_section(history, store_dir):
    before = files_of(store_dir)
    html = report.build(service(store_dir))
    assert files_of(store_dir) == before          # no event, checkpoint, ref or witness written

    assert html.startswith("<!DOCTYPE html>") and html.count("<html") == 1 and html.rstrip().endswith("</html>")
    low = html.lower()
    assert "<script" not in low and "http://" not in low and "https://" not in low
    doc = Tags(html)
    names = {t for t, _ in doc.tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed", "base", "form", "svg", "i", "b"}
    for tag, attrs in doc.tags:
        assert "src" not in attrs and not any(a.startswith("on") for a in attrs), (tag, attrs)
        if "href" in attrs:
            assert attrs["href"].startswith("#") and attrs["href"][1:] in SECTIONS, attrs
    assert "url(" not in doc.style and "@import" not in doc.style
    csp = next(a["content"] for t, a in doc.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp

    # hostile strings: escaped, clipped with a note, never raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;svg onload=alert(3)&gt;\\u202egnp.exe" in html and "\u202e" not in html
    assert "&lt;i&gt;c.txt&lt;/i&gt; was never written" in html
    assert "&lt;b&gt;boom&lt;/b&gt;" in html
    assert LONG not in html and "L" * 150 in html and "more characters not shown" in html
    # the name that is not UTF-8: its display form and its exact bytes
    assert "caf\ufffd.txt" in html and "caf\\xe9.txt" in html

    for section in SECTIONS:
        assert f'<section id="{section}">' in html and f'href="#{section}"' in html
    level, word = verdict(html)
    assert (level, word) == ("ok", "INTEGRITY OK")
    # the operations and their evidence
    assert history["resolved"] in html and history["replayed"] in html
    assert "resolved by operator-cli: not_applied" in html
    assert "settled by evidence: not_applied" in html and "pre-image" in html
    assert "replayed once as" in html
    # checkpoints with diffstats, retention, the wind tunnel
    assert history["first"][:12] in html and "chronos.restore" in html
    assert "max_checkpoints" in html and "crash-points" in html and "mid_append" in html
    budget = re.search(r"<dt>store_budget_mb</dt><dd>([^<]*)</dd>", html).group(1)
    assert budget.startswith("10240") and " used (" in budget          # the profile-wide budget's use


def test_a_tampered_witness_makes_the_verdict_say_what_was_found(small, store_dir):
    witness = store_dir.with_name("store.journal-witness.json")
    w = json.loads(read_doc(witness))
    w["seq"] += 5
    write_doc(witness, json.dumps(w).encode())
    (store_dir / "chronos" / "windtunnel-last.json").write_text("{not json")
    html = report.build(service(store_dir))
    assert "windtunnel-last.json: not valid JSON" in html
    level, word = verdict(html)
    assert (level, word) == ("bad", "PROBLEMS FOUND")
    why = re.search(r'<p class="why">([^<]*)</p>', html).group(1)
    assert "edited" in why and "witness" in why
    assert "Problems found by journal verify" in html


def test_no_store_and_no_journal_are_said_and_never_created(tmp_path, store_dir, ws, cli, monkeypatch):
    html = report.build(service(store_dir))
    assert verdict(html) == ("none", "NO STORE")
    assert not store_dir.exists()
    for section in SECTIONS:
        assert f'<section id="{section}">' in html

    Chronos._instances.clear()
    assert cli("snapshot", "-m", "only a checkpoint", cwd=ws).rc == 0     # a store, no journal
    html = report.build(service(store_dir))
    assert verdict(html) == ("none", "NO JOURNAL YET")
    assert "only a checkpoint" in html
    assert not store_dir.with_name("store.journal-witness.json").exists()
    assert git("--git-dir", store_dir, "show-ref", check=False).stdout.count("refs/chronos/journal") == 0

    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    path = report.write(service(store_dir))      # by default beside the store, not the current folder
    assert path.parent == store_dir.parent / "chronos-git-reports" and list(out.iterdir()) == []
    assert re.fullmatch(r"chronos-git-report-no-journal-\d{8}T\d{6}Z\.html", path.name)
    assert verdict(path.read_text()) == ("none", "NO JOURNAL YET")
    with pytest.raises(ValueError, match="inside the store"):
        report.write(service(store_dir), store_dir / "r.html")
    assert not (store_dir / "r.html").exists()


def test_write_names_the_file_after_the_journal(small, store_dir, tmp_path):
    res = report.written(service(store_dir), tmp_path)
    jid = json.loads(read_doc(store_dir.with_name("store.journal-witness.json")))["journal_id"]
    assert Path(res.path).name.startswith(f"chronos-git-report-{jid[:8]}-")
    assert res.verdict == "INTEGRITY OK" and res.level == "ok"
    assert report.write(service(store_dir), tmp_path / "x.html") == tmp_path / "x.html"


# ------------------------------------------------------------------ HTTP
def _stable(html: str) -> str:
    """Without what differs between two renderings: the time it was made, how long verify took."""
    html = re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", "generated", html)
    html = re.sub(r"<dd>\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ by", "<dd>by", html)
    return re.sub(r"\(in [\d.]+ s\)", "", html)


@pytest.mark.process
def test_get_report_over_http(history, store_dir):
    srv = Server(create_app(store_dir, Settings(), token=TOKEN))
    try:
        with httpx.Client(timeout=60) as c:
            r = c.get(srv.base + "/report", headers={"X-Hermes-Session-Token": TOKEN})
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("text/html")
            assert "default-src 'none'" in r.headers["content-security-policy"]
            assert _stable(r.text) == _stable(report.build(service(store_dir)))
            assert verdict(r.text) == ("ok", "INTEGRITY OK")

            r = c.get(srv.base + "/report")
            assert r.status_code == 401 and r.json() == {"status": "error", "error": "unauthorized", "code": "unauthorized"}
            r = c.get(srv.base + "/report", headers={"X-Hermes-Session-Token": TOKEN, "Host": "evil.example"})
            assert r.status_code == 403
            r = c.get(srv.base + "/report", params={"limit": 0}, headers={"X-Hermes-Session-Token": TOKEN})
            assert r.status_code == 400 and r.json()["status"] == "error"

            spec = c.get(srv.base + "/openapi.json", headers={"X-Hermes-Session-Token": TOKEN}).json()
            ok = spec["paths"][f"{PREFIX}/report"]["get"]["responses"]["200"]["content"]
            assert list(ok) == ["text/html"]
    finally:
        srv.stop()
