"""The report page in Chromium: self-contained (no request leaves it), its plots drawn, its table whole."""

from __future__ import annotations

import json

from nereid.analyze import report, summary
from nereid.analyze.search import Goal, brute
from tests.analyze.landscapes import FakeMeasurer, python_landscape, python_space
from tests.frontends.console.conftest import browser  # noqa: F401 (the fixture)


def test_report_renders_offline_with_its_plots(tmp_path, browser):  # noqa: F811
    space, goal = python_space(), Goal(latency_budget_ms=12.0)
    outcomes = list(brute(space, (1, 4, 16), FakeMeasurer(space, python_landscape), goal))
    document, chosen = summary.document(
        space,
        outcomes,
        goal,
        models=["add_sub"],
        search="brute",
        protocol="http",
        load_generator="built-in load generator",
        wall_s=12.0,
        complete=True,
        interrupted=False,
    )
    assert chosen is not None
    page = report.write_report(document, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["chosen"] == space.key(chosen.candidate)

    context = browser.new_context(viewport={"width": 1200, "height": 900})
    requests = []
    context.on("request", lambda r: requests.append(r.url))
    tab = context.new_page()
    try:
        tab.goto(page.as_uri())
        tab.wait_for_load_state("load")
        sizes = tab.eval_on_selector_all("img", "imgs => imgs.map(i => [i.complete, i.naturalWidth])")
        assert len(sizes) == 3 and all(done and width > 300 for done, width in sizes)
        rows = tab.locator("tbody tr")
        assert rows.count() == space.size()
        assert tab.locator("tr.chosen").count() == 1
        assert "Best:" in tab.locator("body").inner_text()
        shot = tab.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        assert len(shot) > 20_000
    finally:
        context.close()
    # the page itself, then data: URLs only
    assert requests[0] == page.as_uri()
    assert all(url.startswith("data:") for url in requests[1:])
