"""LEARNING.md: lessons cite candidates, people's notes survive, the cap holds by consolidation."""

from pathlib import Path

from test_rules import History

from eat.events import CandidateEvaluated
from eat.learning import BEGIN, END, render, update
from eat.target import load_target

TARGET = load_target(Path(__file__).parent.parent / "examples" / "cpu_matmul")


def grown_history(n: int) -> History:
    h = History("coordinate-1")
    orders = TARGET.knobs["LOOP_ORDER"].values
    for i in range(n):
        h.eval(
            "coordinate-1",
            1.0 + 0.1 * i,
            LOOP_ORDER=orders[i % len(orders)],
            TILE=16 * (i % 4),
            CFLAGS="-O3",
        )
    return h


def test_lessons_cite_candidates_and_knob_effects():
    text = render(grown_history(6).state, TARGET)
    assert "c0006 (team coordinate-1): 1.50x" in text
    assert "LOOP_ORDER IJK -> IKJ" in text and "(c0002 over c0001)" in text
    assert "LOOP_ORDER: best with KJI (1.50x, c0006)" in text
    assert "untried knob values:" in text and "UNROLL=1" in text


def test_the_best_s_one_knob_neighbours_are_listed_in_the_knobs_order():
    """All else equal: candidates one knob away from the best, not those that changed two."""
    h = History("coordinate-1")
    best = dict(LOOP_ORDER="IJK", TILE=64, CFLAGS="-O3")
    h.eval("coordinate-1", 2.0, **{**best, "TILE": 128})  # c0001
    h.eval("coordinate-1", 3.0, **best)  # c0002, the best
    h.eval("coordinate-1", 1.5, **{**best, "TILE": 16})  # c0003
    h.eval("coordinate-1", None, status="compile_error", **{**best, "LOOP_ORDER": "KJI"})
    h.eval("coordinate-1", 2.9, **{**best, "TILE": 32, "CFLAGS": "-O2"})  # two knobs away
    text = render(h.state, TARGET)
    block = text.split("## One knob from the best (c0002, 3.00x)\n\n")[1].split("\n\n")[0]
    others = [n for n in TARGET.knobs if n not in ("LOOP_ORDER", "TILE")]
    assert block.splitlines() == [
        "- LOOP_ORDER IJK -> KJI: compile_error (c0004)",
        "- TILE 64 -> 16: 1.50x (c0003)",  # the values in the target's order
        "- TILE 64 -> 128: 2.00x (c0001)",
        f"- not measured yet: {', '.join(others)}",
    ]


def test_a_copy_of_the_best_s_program_says_so_and_is_no_second_configuration_of_the_skill():
    """A one-knob neighbour that builds the best's program (a knob the build ignores there) is
    listed as that program, and the skill's top configurations name the program once."""
    from eat.skill import top_configs

    h = History("coordinate-1")
    best = dict(LOOP_ORDER="IJK", MR=6, NR=16)
    h.eval("coordinate-1", 3.0, **best)  # c0001
    h.eval("coordinate-1", 3.0, same_as="c0001", **{**best, "LOOP_ORDER": "IKJ"})  # c0002
    h.eval("coordinate-1", 2.0, **{**best, "MR": 4})  # c0003
    text = render(h.state, TARGET)
    assert "- LOOP_ORDER IJK -> IKJ: 3.00x (c0002, the same program as c0001)" in text
    assert [c.candidate for c in top_configs(h.state)] == ["c0001", "c0003"]


def test_the_best_s_neighbours_over_the_knob_index_are_what_differs_finds():
    """around_best compares the run's KnobIndex at once; it finds the candidates that the plain
    definition, differs(c, best) == 1, finds: with failures, values of mixed types (2.5 and
    "2.5" differ) and a knob that appears late."""
    import random

    from eat.knobspace import differs
    from eat.learning import around_best

    for seed in range(6):
        rng = random.Random(seed)
        h = History("coordinate-1")
        for i in range(300):
            knobs = {"LOOP_ORDER": rng.choice(["IJK", "IKJ"]), "TILE": rng.choice([0, 16])}
            knobs |= {"UNROLL": rng.choice([1, 2.5, "2.5"]), "CFLAGS": rng.choice(["-O2", "-O3"])}
            if i > 100 and rng.random() < 0.3:
                knobs["VEC"] = rng.choice([8, 16])
            ok = rng.random() > 0.1
            h.eval(
                "coordinate-1",
                rng.uniform(1, 3) if ok else None,
                **knobs,
                status="ok" if ok else "crash",
            )
        b = h.state.best
        want = {c.cid for c in h.state.candidates.values() if differs(c.knobs, b.knobs) == 1}
        lines, _ = around_best(h.state, TARGET)
        assert {line.rsplit("(", 1)[1].rstrip(")") for line in lines} == want and want


def test_size_cap_holds_by_consolidating_old_lessons_not_cutting_the_end():
    h = grown_history(30)
    full = render(h.state, TARGET, cap=100_000)
    capped = render(h.state, TARGET, cap=2000)
    assert len(capped) <= 2000 < len(full)
    assert "consolidated: " in capped and "c0001" in capped  # old lessons still cited
    assert capped.rstrip().endswith(full.rstrip().splitlines()[-1])  # the end is intact
    assert "## Open hypotheses" in capped and "(c0030 over c0029)" in capped


def test_update_keeps_what_people_wrote_outside_the_markers(tmp_path):
    doc = tmp_path / "LEARNING.md"
    doc.write_text(f"# Learning\n\nMy note: try AVX-512.\n\n{BEGIN}\nold\n{END}\n\nP.S. mine\n")
    assert update(doc, grown_history(3).state, TARGET)
    text = doc.read_text()
    assert "My note: try AVX-512." in text and text.endswith("P.S. mine\n")
    assert "old" not in text and "c0003" in text
    assert not update(doc, grown_history(3).state, TARGET)  # unchanged state: no rewrite
    doc.write_text("# Learning\n\nsomeone deleted the markers\n")
    update(doc, grown_history(3).state, TARGET)
    assert "someone deleted the markers" in doc.read_text() and BEGIN in doc.read_text()


def test_lessons_keep_the_values_of_their_moment_and_count_what_they_outgrew():
    from eat.events import EliteRetimed

    h = History("coordinate-1")
    h.eval("coordinate-1", 2.0, TILE=0)
    h.eval("coordinate-1", 3.0, TILE=16)
    h.add(EliteRetimed(candidate="c0002", speedup=1.0))  # now 2.0 by its median
    assert "TILE 0 -> 16: 2.00x -> 3.00x (c0002 over c0001)" in render(h.state, TARGET)
    long = grown_history(41)  # one more new best than are kept: 16 retire
    assert long.state.older_lessons == 16
    text = render(long.state, TARGET, cap=100_000)
    assert "consolidated: 16 earlier lessons, resting on c0001, c0002, c0003" in text
    assert text.index("## Lessons") < text.index("## Best so far")  # stable part first


def test_candidates_without_knobs_are_described_by_their_idea():
    h = History("coder-1")
    for i, speed in enumerate((2.0, 3.0), 1):
        h.add(
            CandidateEvaluated(
                candidate=f"c{i:04d}",
                team="coder-1",
                source_hash=f"s{i}",
                status="ok",
                speedup=speed,
                noise=0.01,
                idea=f"idea number {i}",
            )
        )
    text = render(h.state, TARGET)
    assert "idea number 2: 2.00x -> 3.00x (c0002 over c0001)" in text
    assert "## What each knob does" not in text and "knobs" not in text


def test_what_each_knob_does_cites_its_candidates_figure_after_a_retime():
    from eat.events import EliteRetimed

    h = History("coordinate-1")
    h.eval("coordinate-1", 2.0, TILE=0)
    h.eval("coordinate-1", 3.0, TILE=16)
    h.add(EliteRetimed(candidate="c0002", speedup=2.4))  # its median now 2.70x
    text = render(h.state, TARGET)
    assert "c0002 (team coordinate-1): 2.70x" in text  # best so far
    assert "TILE: best with 16 (2.70x, c0002); with 0 at most 2.00x over 1 try (c0001)" in text
    assert "3.00x, c0002" not in text  # the lesson keeps 3.00x, the knobs say what holds now


def test_a_long_description_is_cut_at_a_words_end_and_marked():
    knobs = {f"KNOB_{i}": f"value{i}" for i in range(20)}  # some 300 characters
    h = History("coordinate-1")
    h.eval("coordinate-1", 2.0, **knobs)
    first = next(x for x in render(h.state, TARGET).splitlines() if "first working" in x)
    shown = first.split("(", 1)[1].rstrip(")")
    assert shown.endswith(" …") and len(shown) <= 160
    assert all(f"{k}={v}" in shown for k, v in (x.split("=") for x in shown[:-2].split(", ")))


def test_a_restructure_that_did_not_help_is_judged_against_the_best_of_its_moment():
    from eat.events import Restructured, RestructureScored

    h = History("coordinate-1", "explorer-2")
    h.eval("coordinate-1", 2.0)
    fork = h.add(Restructured(op="fork", team="coordinate-3", reason="r", best_before=2.0))
    h.eval("explorer-2", 3.0)  # the run's best rises, by another team
    h.add(RestructureScored(restructure=fork.seq, helped=False, best_before=2.0, best_after=3.0))
    assert (
        "- restructure (fork coordinate-3) did not help: its teams did not beat the run's best "
        "when it was made, 2.00x (3.00x when judged)\n" in render(h.state, TARGET)
    )


def test_restructures_in_a_row_with_one_verdict_are_one_lesson():
    """A stalled run forks one team after another, each judged against the same best: one line
    names them all; a verdict that differs starts its own line; a consolidation counts each."""
    from eat.events import Restructured, RestructureScored

    h = History("coordinate-1", "explorer-2")
    h.eval("coordinate-1", 2.0)
    for team in ("coordinate-3", "explorer-4", "coordinate-5"):
        fork = h.add(Restructured(op="fork", team=team, reason="r", best_before=2.0))
        h.add(
            RestructureScored(restructure=fork.seq, helped=False, best_before=2.0, best_after=2.0)
        )
    fork = h.add(Restructured(op="fork", team="model-6", reason="r", best_before=2.0))
    h.eval("model-6", 3.0)
    h.add(RestructureScored(restructure=fork.seq, helped=True, best_before=2.0, best_after=3.0))
    lines = render(h.state, TARGET).split("## Lessons\n\n")[1].split("\n\n")[0].splitlines()
    assert lines[1] == (
        "- restructures (fork coordinate-3, fork explorer-4, fork coordinate-5) did not help: "
        "their teams did not beat the run's best when they were made, 2.00x"
    )
    assert lines[2].startswith("- ") and "(c0002 over c0001)" in lines[2]
    assert lines[3].startswith("- restructure (fork model-6) helped")
    assert len(lines) == 4
    capped = render(h.state, TARGET, cap=len(render(h.state, TARGET)) - 1)
    assert "- consolidated: 4 earlier lessons" in capped  # the first best and the three forks


def test_a_best_of_a_lower_figure_says_it_leads_by_being_steadier():
    h = History("coordinate-1")
    h.eval("coordinate-1", 3.0, noise=0.20, TILE=0)
    h.eval("coordinate-1", 2.9, noise=0.01, TILE=16)  # ranked by the figure less its spread
    assert h.state.best.cid == "c0002"
    text = render(h.state, TARGET)
    assert "TILE 0 -> 16: 3.00x -> 2.90x, steadier (±1% against ±20%) (c0002 over c0001)" in text


def test_a_retime_that_hands_the_lead_over_is_a_lesson_and_the_knobs_follow():
    from eat.events import EliteRetimed

    h = History("coordinate-1")
    h.eval("coordinate-1", 2.0, noise=0.01, TILE=0)
    h.eval("coordinate-1", 2.3, noise=0.20, TILE=16)  # higher, but too noisy to lead yet
    assert h.state.best.cid == "c0001"
    h.add(EliteRetimed(candidate="c0002", speedup=2.3))  # its spread narrows: it leads
    assert h.state.best.cid == "c0002"
    h.eval("coordinate-1", 2.6, noise=0.01, TILE=16, UNROLL=2)  # a new best ...
    h.add(EliteRetimed(candidate="c0003", speedup=1.8))  # ... timed again: 2.20x, leading
    h.add(EliteRetimed(candidate="c0003", speedup=1.7))  # 1.80x: c0002 leads again
    assert h.state.best.cid == "c0002"
    text = render(h.state, TARGET)
    assert (
        "- c0002, timed again (2 measurements, now 2.30x), leads: 2.30x against c0001's 2.00x\n"
        in text
    )
    assert "- c0003, timed again (3 measurements, now 1.80x), no longer leads: c0002 does" in text
    # TILE=16's best was c0003 when it landed; the run's best, also TILE=16, is cited now
    assert "TILE: best with 16 (2.30x, c0002); with 0 at most 2.00x over 1 try (c0001)" in text


def test_a_program_candidate_graded_again_is_said_to_be_graded_not_timed():
    from eat.events import CandidateEvaluated, EliteRetimed, describe

    h = History("coordinate-1")
    for n, (gain, noise, score) in enumerate([(2.0, 0.01, 50.0), (2.3, 0.20, 57.5)], 1):
        h.add(
            CandidateEvaluated(
                candidate=f"c{n:04d}",
                team="coordinate-1",
                source_hash=f"h{n}",
                status="ok",
                speedup=gain,
                noise=noise,
                knobs={"K": n},
                score=score,
            )
        )
    retime = h.add(EliteRetimed(candidate="c0002", speedup=2.3, score=57.4))
    assert h.state.best.cid == "c0002"
    assert describe(retime) == "elite c0002 graded again: ok 2.30x (score 57.4)"
    assert "- c0002, graded again (2 measurements, now 2.30x), leads" in render(h.state, TARGET)
