from pathlib import Path


def matmul(A, B):
    # Tries to add a line to ../escaped, in the evaluation's folder outside its own (where a
    # cache or a workspace could be); writes a scratch file in its own folder, which it may.
    try:
        with open("../escaped", "a") as f:
            f.write("written by a candidate\n")
    except OSError:
        pass
    Path("scratch").write_text("x")  # raises (a crash) if its own folder is closed to it
    return A @ B
