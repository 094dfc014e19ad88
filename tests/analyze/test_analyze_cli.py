"""`nereid analyze`'s command line, and `nereid` dispatching to it (every other command line is tritonserver's)."""

from __future__ import annotations

import pytest

from nereid.analyze.cli import PERF_ANALYZER_ENV, parse_settings
from nereid.cli import main

REQUIRED = ["--model", "add_sub", "--output-repository", "out", "--report-dir", "report"]


def test_the_issue_command_line(tmp_path):
    settings = parse_settings(
        [
            "--model-repository",
            str(tmp_path),
            *REQUIRED,
            "--model",
            "ocr",
            "--search",
            "brute",
            "--budget-minutes",
            "2",
            "--latency-budget-ms",
            "15",
            "--min-throughput",
            "100",
            "--protocol",
            "grpc",
            "--concurrency",
            "16,1,4",
            "--input-data",
            "random",
        ],
        environ={},
    )
    assert settings.models == ("add_sub", "ocr")
    assert settings.budget_s == 120 and settings.latency_budget_ms == 15 and settings.min_throughput == 100
    assert settings.concurrencies == (1, 4, 16) and settings.protocol == "grpc"
    assert settings.input_data == "random" and settings.search == "brute"


def test_perf_analyzer_by_flag_then_environment_else_the_builtin_generator(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no perf_analyzer on PATH
    base = ["--model-repository", str(tmp_path), *REQUIRED]
    assert parse_settings(base, environ={}).perf_analyzer is None
    assert parse_settings(base, environ={PERF_ANALYZER_ENV: "/opt/pa"}).perf_analyzer == "/opt/pa"
    flagged = [*base, "--perf-analyzer", "/x/pa"]
    assert parse_settings(flagged, environ={PERF_ANALYZER_ENV: "/opt/pa"}).perf_analyzer == "/x/pa"
    assert parse_settings([*flagged, "--load-generator", "builtin"], environ={}).perf_analyzer is None
    with pytest.raises(SystemExit, match="no perf_analyzer"):
        parse_settings([*base, "--load-generator", "perf_analyzer"], environ={})


@pytest.mark.parametrize(
    "bad", [["--concurrency", "0,4"], ["--execution-modes", "fork"], ["--search", "all"]]
)
def test_bad_values_are_refused(tmp_path, bad, capsys):
    with pytest.raises(SystemExit):
        parse_settings(["--model-repository", str(tmp_path), *REQUIRED, *bad], environ={})
    assert "error" in capsys.readouterr().err


def test_nereid_analyze_dispatches_and_other_command_lines_stay_tritonserver_s(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--model-repository", str(tmp_path / "missing"), *REQUIRED])
    assert "nereid analyze: error: --model-repository: no folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model-repository", str(tmp_path), "--bogus-flag"])
    assert "nereid analyze" not in capsys.readouterr().err
