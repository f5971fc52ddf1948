"""Steering by files: people's saves survive eat's rewrites; edits become human_steered events
that the next prompts carry."""

import subprocess
import sys

from eat.learning import BEGIN, END, render, splice, update
from eat.workspace import merge_write
from test_learning import TARGET, grown_history


PERSON = """
import os, random, sys, time
from pathlib import Path
doc, end = Path(sys.argv[1]), sys.argv[2]
rng = random.Random(7)
for i in range(50):
    text = doc.read_text()        # read, edit, save: as an editor does
    text = text.replace(end, end + f"\\nnote {i} from a person", 1) if i % 3 == 0 \\
        else text.rstrip("\\n") + f"\\nnote {i} from a person\\n"
    if i % 2:                     # in place: truncate, then write
        with open(doc, "w") as f:
            f.write(text)
    else:                         # a new file renamed over the old one
        tmp = doc.with_name(doc.name + ".swp")
        tmp.write_text(text)
        os.replace(tmp, doc)
    time.sleep(rng.uniform(0, 0.01))
"""


def test_fifty_saves_racing_eats_rewrites_lose_nothing(tmp_path):
    # The person is another process, as an editor is, saving both ways editors do while eat
    # rewrites its block as fast as it can.
    doc = tmp_path / "LEARNING.md"
    doc.write_text(f"# Learning\n\n{BEGIN}\nNothing learned yet.\n{END}\n")
    states = [grown_history(n).state for n in range(1, 9)]
    blocks = [render(s, TARGET) for s in states]
    person = subprocess.Popen([sys.executable, "-c", PERSON, str(doc), END])
    rewrites = 0
    while person.poll() is None:
        merge_write(doc, lambda text: splice(text, blocks[rewrites % len(blocks)]))
        rewrites += 1
    assert person.returncode == 0
    update(doc, states[-1], TARGET)
    text = doc.read_text()
    missing = [i for i in range(50) if f"note {i} from a person\n" not in text + "\n"]
    assert not missing, f"lost saves {missing} over {rewrites} rewrites"
    assert text.count(BEGIN) == 1 and text.count(END) == 1 and "c0008" in text
    assert rewrites >= 50
