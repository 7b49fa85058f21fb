"""How scripts/test.sh spreads the suite over pytest-xdist workers: a module-scoped fixture (a module's compiled
kernels: up to 90 s on 2 cores) must be computed once per run, not once per worker. `--dist loadgroup` with
`xdist_group` marks stopped grouping under pytest 9 (every worker computed such fixtures: a quarter of CI's time);
`--dist loadfile` sends a whole file to one worker."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_a_module_fixture_is_computed_once_under_the_suites_dist_mode(tmp_path):
    dist = re.search(r"-m pytest .*--dist (\w+)", (ROOT / "scripts" / "test.sh").read_text()).group(1)
    record = tmp_path / "computed"
    (tmp_path / "test_shared.py").write_text(
        "import os, time, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def compiled():\n"
        f"    with open({str(record)!r}, 'a') as f:\n"
        "        f.write(os.environ.get('PYTEST_XDIST_WORKER', 'main') + '\\n')\n"
        "@pytest.mark.parametrize('i', range(40))\n"
        "def test_uses_it(compiled, i):\n"
        "    time.sleep(0.05)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", dist, "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_shared.py")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert len(record.read_text().split()) == 1, (dist, record.read_text())
