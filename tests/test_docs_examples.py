"""The guide's example package (docs/examples/shop, docs/own-agent.md) runs as the guide says.

`convdb run --agent shop.agent:make` with the package on the path (what `pip install -e` gives),
then `python -m shop.report`: the providers' own records, one charge and one text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from tests.producers._support import direct

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "docs" / "examples" / "shop"
TASK = """Charge cus_42 five euros, then text them the receipt.
!charge {"customer": "cus_42", "cents": 500}
!send_sms {"to": "cus_42", "text": "Paid: {{last}}"}"""


@pytest.mark.kafka
def test_shop_example_runs_with_convdb_run_and_its_report_reads_the_providers(settings: Settings) -> None:
    entry_points = tomllib.loads((SHOP / "pyproject.toml").read_text())["project"]["entry-points"]
    assert entry_points["convdb.agents"] == {"shop": "shop.agent:make"}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")},
        **direct(settings).to_env(),
        "PYTHONPATH": str(SHOP),
    }
    run = [sys.executable, "-m", "convdb", "run", "--agent", entry_points["convdb.agents"]["shop"], TASK]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'action         {"tool_name": "charge"' in done.stdout and "finished" in done.stdout
    assert "texted cus_42" in done.stdout
    report = subprocess.run(
        [sys.executable, "-m", "shop.report"], env=env, capture_output=True, text=True, timeout=60
    )
    assert report.returncode == 0, report.stderr
    records = json.loads(report.stdout)
    assert list(records["charges"].values()) == [1] and list(records["payment_calls"].values()) == [1]
    assert list(records["sms"].values()) == [1]
    (charge_op,) = records["charges"]
    assert charge_op.startswith(done.stdout.strip().splitlines()[-1].split()[1].rstrip(":") + "/")

    unknown = subprocess.run(
        [sys.executable, "-m", "convdb", "run", "--agent", "no-such-agent", "hi"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert unknown.returncode == 2, unknown.stderr
    assert "unknown agent 'no-such-agent'" in unknown.stderr


@pytest.mark.kafka
def test_the_langgraph_example_runs_as_docs_langgraph_says(settings: Settings) -> None:
    """docs/examples/langgraph/checkout.py: the graph on convdb's saver, its charge under `@effect`."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")},
        **direct(settings).to_env(),
    }
    example = ROOT / "docs" / "examples" / "langgraph" / "checkout.py"
    done = subprocess.run(
        [sys.executable, str(example)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["receipts"] == [{"charge_id": "ch_1", "customer": "cus_42", "cents": 500}]
    assert out["checkpoints"] == 3 and out["provider_charges"] == 1
    again = subprocess.run(
        [sys.executable, str(example)], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert len(json.loads(again.stdout)["receipts"]) == 2  # the thread came back from Kafka
