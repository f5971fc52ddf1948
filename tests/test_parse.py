"""Turning a coder's reply into a candidate source: fenced whole files and SEARCH/REPLACE edits."""

import textwrap

import pytest

from eat.agents.parse import (
    NO_CODE,
    Parsed,
    apply_edits,
    correction_message,
    extract_fenced,
    parse_reply,
)


def d(text: str) -> str:
    """Dedented, without the leading newline of a triple-quoted literal."""
    return textwrap.dedent(text).lstrip("\n")


MATMUL = d("""
    #include <stddef.h>

    void matmul(const float *a, const float *b, float *c, int n) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                float s = 0.0f;
                for (int k = 0; k < n; k++)
                    s += a[i * n + k] * b[k * n + j];
                c[i * n + j] = s;
            }
    }
""")

PY_MATMUL = d("""
    import numpy as np


    def matmul(a, b):
        return a @ b
""")

CUDA = d("""
    __global__ void matmul(const float *a, const float *b, float *c, int n) {
        int i = blockIdx.y * blockDim.y + threadIdx.y;
        int j = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n && j < n) {
            float s = 0.0f;
            for (int k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j];
            c[i * n + j] = s;
        }
    }
""")

# Source with a ``` line inside (a docstring quoting markdown), so only a longer fence holds it.
PY_WITH_FENCE = d('''
    def matmul(a, b):
        """Multiply. Example:
        ```
        matmul(x, y)
        ```
        """
        return a @ b
''')

SNIPPET = "matmul(a, b, c, 512);\n"


def fenced(body: str, tag: str = "c", fence: str = "```") -> str:
    return f"{fence}{tag}\n{body}{fence}\n"


# (id, reply, entry, expected source): replies that carry a whole file.
FILE_CASES = [
    ("plain-c", fenced(MATMUL), "matmul", MATMUL),
    ("no-language-tag", fenced(MATMUL, tag=""), "matmul", MATMUL),
    ("cpp-tag", fenced(MATMUL, tag="cpp"), "matmul", MATMUL),
    ("cuda-tag", fenced(CUDA, tag="cuda"), "matmul", CUDA),
    ("cu-tag-with-space", f"``` cu\n{CUDA}```\n", "matmul", CUDA),
    ("python-tag", fenced(PY_MATMUL, tag="python"), "matmul", PY_MATMUL),
    ("py-tag", fenced(PY_MATMUL, tag="py"), "matmul", PY_MATMUL),
    ("tilde-fence", fenced(MATMUL, fence="~~~"), "matmul", MATMUL),
    ("four-backticks-hold-three", fenced(PY_WITH_FENCE, "python", "````"), "matmul", PY_WITH_FENCE),
    (
        "tilde-fence-holds-backticks",
        fenced(PY_WITH_FENCE, "python", "~~~"),
        "matmul",
        PY_WITH_FENCE,
    ),
    (
        "prose-before-and-after",
        "I tiled the loops for cache reuse.\n\n" + fenced(MATMUL) + "\nThis should be ~2x faster.",
        "matmul",
        MATMUL,
    ),
    ("intro-line-only", "Here you go:\n" + fenced(MATMUL), "matmul", MATMUL),
    ("no-entry-given", fenced("int f(void) { return 1; }\n"), None, "int f(void) { return 1; }\n"),
    ("unclosed-fence-runs-to-end", "```c\n" + MATMUL, "matmul", MATMUL),
    (
        "indented-fence-in-list",
        "1. The file:\n\n   ```c\n" + textwrap.indent(MATMUL, "   ") + "   ```\n",
        "matmul",
        MATMUL,
    ),
    ("crlf", fenced(MATMUL).replace("\n", "\r\n"), "matmul", MATMUL),
    (
        "picks-block-defining-entry-over-longer-one",
        fenced("// helper notes\n" * 40, "c") + "And the kernel:\n" + fenced(PY_MATMUL, "python"),
        "matmul",
        PY_MATMUL,
    ),
    (
        "defining-block-over-call-snippet",
        "Call it like this:\n" + fenced(SNIPPET) + "Full file:\n" + fenced(MATMUL),
        "matmul",
        MATMUL,
    ),
    (
        "prototype-is-not-a-definition",
        fenced("void matmul(const float *a, const float *b, float *c, int n);\n" * 3)
        + fenced(MATMUL),
        "matmul",
        MATMUL,
    ),
    (
        "longest-when-none-defines-entry",
        fenced("int x;\n") + fenced("int helper(int y) {\n    return y + 1;\n}\n"),
        None,
        "int helper(int y) {\n    return y + 1;\n}\n",
    ),
    (
        "ignores-bash-block",
        fenced("gcc -O3 -march=native -shared -fPIC -o libmatmul.so matmul.c && ./bench\n", "bash")
        + fenced(MATMUL),
        "matmul",
        MATMUL,
    ),
    (
        "ignores-sh-and-diff-blocks",
        fenced("--- a/matmul.c\n+++ b/matmul.c\n@@ -1 +1 @@\n-" + MATMUL + "+" + MATMUL, "diff")
        + fenced("make && ./run matmul\n", "sh")
        + fenced(MATMUL, ""),
        "matmul",
        MATMUL,
    ),
    (
        "call-in-a-condition-is-not-a-definition",
        fenced(
            "int main(void) {\n    if (matmul(a, b, c, 64)) {\n        return 1;\n    }\n"
            "    return 0;\n}\n"
        )
        + fenced("void matmul(void) {}\n"),
        "matmul",
        "void matmul(void) {}\n",
    ),
    (
        "inline-triple-backticks-are-not-a-fence",
        "Wrap code in ```c``` blocks, as asked.\n" + fenced(MATMUL),
        "matmul",
        MATMUL,
    ),
]


@pytest.mark.parametrize(
    "reply,entry,expected", [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES]
)
def test_whole_file_replies(reply, entry, expected):
    parsed = parse_reply(reply, original=MATMUL, entry=entry)
    assert parsed == Parsed(source=expected, error=None, kind="file")


def sr(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


# (id, original, reply, expected source): replies that carry SEARCH/REPLACE edits.
EDIT_CASES = [
    (
        "single-block",
        MATMUL,
        sr("            float s = 0.0f;\n", "            float s = 0.0f;  // acc\n"),
        MATMUL.replace("float s = 0.0f;", "float s = 0.0f;  // acc"),
    ),
    (
        "multiple-blocks-in-order",
        MATMUL,
        "First hoist the row:\n"
        + sr(
            "    for (int i = 0; i < n; i++)\n",
            "    #pragma omp parallel for\n    for (int i = 0; i < n; i++)\n",
        )
        + "\nThen unroll:\n"
        + sr(
            "            for (int k = 0; k < n; k++)\n",
            "            #pragma GCC unroll 4\n            for (int k = 0; k < n; k++)\n",
        ),
        MATMUL.replace("    for (int i", "    #pragma omp parallel for\n    for (int i").replace(
            "            for (int k", "            #pragma GCC unroll 4\n            for (int k"
        ),
    ),
    (
        "later-block-sees-earlier-edit",
        "int a = 1;\nint b = 2;\n",
        sr("int a = 1;\n", "int a = 10;\n") + sr("int a = 10;\nint b = 2;\n", "int c = 12;\n"),
        "int c = 12;\n",
    ),
    (
        "wrapped-in-fence-with-file-name",
        MATMUL,
        "matmul.c\n```c\n"
        + sr("#include <stddef.h>\n", "#include <stddef.h>\n#include <immintrin.h>\n")
        + "```\n",
        MATMUL.replace("#include <stddef.h>\n", "#include <stddef.h>\n#include <immintrin.h>\n"),
    ),
    (
        "each-block-in-own-fence",
        "int a = 1;\nint b = 2;\n",
        "```c\n"
        + sr("int a = 1;\n", "int a = 3;\n")
        + "```\n\n```c\n"
        + sr("int b = 2;\n", "int b = 4;\n")
        + "```\n",
        "int a = 3;\nint b = 4;\n",
    ),
    (
        "edits-win-over-fenced-file",
        "int a = 1;\n",
        fenced("int z = 0;\n") + sr("int a = 1;\n", "int a = 2;\n"),
        "int a = 2;\n",
    ),
    (
        "trailing-whitespace-tolerant",
        "int a = 1;   \nint b = 2;\t\n",
        sr("int a = 1;\nint b = 2;\n", "int a = 5;\n"),
        "int a = 5;\n",
    ),
    (
        "trailing-whitespace-match-preferred-over-indent",
        "x = 1; \n  x = 1;\n",
        sr("x = 1;\n", "x = 2;\n"),
        "x = 2;\n  x = 1;\n",
    ),
    (
        "indentation-tolerant-less-indented-search",
        MATMUL,
        sr(
            "float s = 0.0f;\nfor (int k = 0; k < n; k++)\n    s += a[i * n + k] * b[k * n + j];\n",
            "float s = 0.0f;\nfor (int k = 0; k < n; k++) {\n"
            "    s += a[i * n + k] * b[k * n + j];\n}\n",
        ),
        MATMUL.replace(
            "            for (int k = 0; k < n; k++)\n",
            "            for (int k = 0; k < n; k++) {\n",
        ).replace("b[k * n + j];\n", "b[k * n + j];\n            }\n"),
    ),
    (
        "indentation-tolerant-keeps-relative-indent",
        "if (x) {\n\tif (y) {\n\t\tz();\n\t}\n}\n",
        sr("if (y) {\n\tz();\n}\n", "if (y) {\n\tz();\n\tw();\n}\n"),
        "if (x) {\n\tif (y) {\n\t\tz();\n\t\tw();\n\t}\n}\n",
    ),
    (
        "indentation-tolerant-more-indented-search",
        "def f():\n    return 1\n",
        sr("        return 1\n", "        x = 1\n        return x\n"),
        "def f():\n    x = 1\n    return x\n",
    ),
    (
        "exact-match-preferred-over-tolerant",
        "  x = 1;\nx = 1;\n",
        sr("x = 1;\n", "x = 2;\n"),
        "  x = 1;\nx = 2;\n",
    ),
    ("delete-lines", "int a;\nint b;\nint c;\n", sr("int b;\n", ""), "int a;\nint c;\n"),
    (
        "crlf-reply-and-original",
        "int a = 1;\r\nint b = 2;\r\n",
        sr("int b = 2;\n", "int b = 3;\n").replace("\n", "\r\n"),
        "int a = 1;\nint b = 3;\n",
    ),
    (
        "original-without-final-newline",
        "int a = 1;",
        sr("int a = 1;\n", "int a = 2;\n"),
        "int a = 2;\n",
    ),
    ("empty-search-on-empty-original", "", sr("", "int a = 1;\n"), "int a = 1;\n"),
]


@pytest.mark.parametrize(
    "original,reply,expected", [c[1:] for c in EDIT_CASES], ids=[c[0] for c in EDIT_CASES]
)
def test_edit_replies(original, reply, expected):
    assert apply_edits(original, reply) == (expected, None)
    assert parse_reply(reply, original) == Parsed(source=expected, error=None, kind="edits")


# (id, reply, original, entry, kind, error substring): replies that cannot be used.
ERROR_CASES = [
    ("empty-reply", "", MATMUL, "matmul", "none", NO_CODE),
    ("whitespace-reply", "  \n\n\t\n", MATMUL, "matmul", "none", NO_CODE),
    (
        "only-prose",
        "I would tile the loops by 64 and vectorize the inner one with AVX2.",
        MATMUL,
        "matmul",
        "none",
        NO_CODE,
    ),
    ("only-bash-block", "Run:\n" + fenced("make bench\n", "bash"), MATMUL, None, "none", NO_CODE),
    ("empty-fenced-block", "```c\n```\n", MATMUL, None, "file", "source is empty"),
    ("whitespace-fenced-block", "```c\n   \n\n```\n", MATMUL, None, "file", "source is empty"),
    (
        "file-without-entry",
        fenced("void gemm(float *c) { c[0] = 0; }\n"),
        MATMUL,
        "matmul",
        "file",
        "the reply does not define matmul",
    ),
    (
        "entry-only-as-prefix",
        fenced("void matmul_kernel(float *c) {}\n"),
        MATMUL,
        "matmul",
        "file",
        "the reply does not define matmul",
    ),
    (
        "edit-result-lacks-entry",
        sr("void matmul(void) {}\n", "void gemm(void) {}\n"),
        "void matmul(void) {}\n",
        "matmul",
        "edits",
        "the reply does not define matmul",
    ),
    ("edit-empties-file", sr("int a;\n", ""), "int a;\n", None, "edits", "source is empty"),
    (
        "missing-search-names-block-2",
        sr("#include <stddef.h>\n", "#include <stdint.h>\n")
        + sr("float t = 1.0f;\n", "float t;\n"),
        MATMUL,
        "matmul",
        "edits",
        "edit block 2: SEARCH text not found (first line: 'float t",
    ),
    (
        "ambiguous-search",
        sr("            for (int j = 0; j < n; j++) {\n", "x\n").replace(
            "            for (int j", "for (int j"
        ),
        "for (int j = 0; j < n; j++) {\n}\nfor (int j = 0; j < n; j++) {\n}\n",
        None,
        "edits",
        "edit block 1: SEARCH text occurs 2 times",
    ),
    (
        "ambiguous-after-tolerance",
        sr("x = 1;\n", "x = 2;\n"),
        "  x = 1;\n    x = 1;\n",
        None,
        "edits",
        "occurs 2 times",
    ),
    (
        "missing-divider",
        "<<<<<<< SEARCH\nint a;\n>>>>>>> REPLACE\n",
        "int a;\n",
        None,
        "edits",
        "edit block 1: missing '======='",
    ),
    (
        "missing-replace-marker",
        "<<<<<<< SEARCH\nint a;\n=======\nint b;\n```\n",
        "int a;\n",
        None,
        "edits",
        "edit block 1: missing '>>>>>>> REPLACE'",
    ),
    (
        "second-block-missing-replace",
        sr("int a;\n", "int b;\n")
        + "<<<<<<< SEARCH\nint b;\n=======\nint c;\n"
        + sr("int c;\n", "int d;\n"),
        "int a;\n",
        None,
        "edits",
        "edit block 2: missing '>>>>>>> REPLACE'",
    ),
    (
        "replace-without-search",
        "int a;\n=======\nint b;\n>>>>>>> REPLACE\n",
        "int a;\n",
        None,
        "edits",
        "edit block 1: '>>>>>>> REPLACE' without '<<<<<<< SEARCH'",
    ),
    (
        "empty-search-on-nonempty-original",
        sr("", "int a;\n"),
        MATMUL,
        None,
        "edits",
        "edit block 1: empty SEARCH section",
    ),
]


@pytest.mark.parametrize(
    "reply,original,entry,kind,error", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_unusable_replies(reply, original, entry, kind, error):
    parsed = parse_reply(reply, original, entry)
    assert parsed.source is None
    assert parsed.kind == kind
    assert error in parsed.error
    assert "\n" not in parsed.error  # one line, to quote in the correction message


def test_extract_fenced_returns_none_without_blocks():
    assert extract_fenced("no code here") is None
    assert extract_fenced(fenced("ls -la\n", "sh")) is None


def test_extract_fenced_prefers_entry_definition():
    reply = fenced(MATMUL) + fenced(PY_MATMUL + "# padding\n" * 50, "python")
    assert extract_fenced(reply, "matmul") == max(MATMUL, PY_MATMUL + "# padding\n" * 50, key=len)
    assert extract_fenced(fenced(SNIPPET * 5) + fenced(MATMUL), "matmul") == MATMUL
    assert extract_fenced(fenced(SNIPPET * 50) + fenced(MATMUL), None) == SNIPPET * 50


def test_apply_edits_without_blocks():
    assert apply_edits(MATMUL, fenced(MATMUL)) == (None, NO_CODE)


@pytest.mark.parametrize("entry", ["matmul", None])
def test_correction_message_names_formats_and_error(entry):
    parsed = parse_reply(sr("float t = 1.0f;\n", "float t;\n"), MATMUL, entry)
    msg = correction_message(parsed, entry)
    assert "edit block 1: SEARCH text not found" in msg
    assert "fenced code block" in msg and "```" in msg
    assert "<<<<<<< SEARCH" in msg and "=======" in msg and ">>>>>>> REPLACE" in msg
    assert "exactly once" in msg
    assert ("`matmul`" in msg) == (entry is not None)
