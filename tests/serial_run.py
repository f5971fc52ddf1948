"""A deterministic run for comparing event histories: offline agents, a fake runner with a
scripted landscape, supervision on (plateaus, restructures, scores)."""

from __future__ import annotations

import json
from pathlib import Path

from fake_runner import FakeRunner

from eat.config import PlateauConfig
from eat.run import start_run
from eat.workspace import Workspace

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
VOLATILE = {"time", "elapsed_s", "seen_seq"}  # differ from run to run by nature


def landscape(k: dict[str, str]) -> float | None:
    """Speedups with structure: a loop order that streams, blocking, flags, and a
    micro-kernel region far from the baseline; one flag combination does not build."""
    if k.get("CFLAGS") == "-O2" and k.get("UNROLL") == "8":
        return None
    x = {"IKJ": 3.0, "KIJ": 2.6, "JIK": 1.1}.get(k.get("LOOP_ORDER", "IJK"), 1.0)
    x *= 1.0 + {"32": 0.3, "64": 0.4, "128": 0.2}.get(k.get("TILE", "0"), 0.0)
    x *= 1.0 + 0.1 * ("march" in k.get("CFLAGS", ""))
    if k.get("MR", "0") != "0":
        x = 2.0 + int(k["MR"]) * 0.8 + (int(k.get("PACK", "0")) * 0.7)
    return round(x, 4)


def run(ws: Path, max_evals: int = 40, seed: int = 3, **overrides) -> list[dict]:
    """Run the scripted landscape to `max_evals`; its events, volatile fields dropped. No
    opening (RunConfig.opening) and the two start teams of the serial loop the reference
    history came from (RunConfig.start_teams' default has since gained a model team)."""
    overrides.setdefault("opening", 0)
    overrides.setdefault("teams", ["coordinate", "explorer"])
    start_run(
        EXAMPLES / "cpu_matmul",
        ws,
        runner=FakeRunner(landscape),
        max_evals=max_evals,
        seed=seed,
        plateau=PlateauConfig(team_window=4, run_window=6, score_after=3),
        **overrides,
    )
    return normalized(Workspace.open(ws).read_events()[0])


def normalized(events) -> list[dict]:
    out = []
    for e in events:
        d = {k: v for k, v in e.model_dump(mode="json").items() if k not in VOLATILE}
        if d["type"] == "run_started":
            # Both runs get the same settings by construction; dropping them keeps a settings
            # field added later from failing the comparison.
            d.pop("target_path")
            d.pop("config")
            d.pop("target_digest", None)
        out.append(d)
    return out


if __name__ == "__main__":  # writes the reference history of the serial loop (one worker)
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        events = run(Path(tmp) / "ws", workers=1)
    Path(sys.argv[1]).write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events))
