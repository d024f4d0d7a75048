"""README.md's "Running on a cluster" block as the cluster tier runs it: the fenced bash block is
taken as written, only its placeholders replaced (the `...` values of its `export` lines, the master
URL, `--packages` by the resolved `--jars` the README names as the alternative), and then one of
its own `submit <job> ...` lines, with the test's options appended.

Any change to the block is thereby tested; a variable the README adds without the tier giving it a
value fails here, by name, rather than running with a placeholder.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.runtime.jvm import REPO_ROOT

README = REPO_ROOT / "README.md"
SECTION = "## Running on a cluster"
PLACEHOLDER_MASTER = "spark://master:7077"
_PACKAGES = re.compile(r"--packages \S+")
_EXPORT = re.compile(r"^export (.*?)(\s+#.*)?$")
_INVOCATION = re.compile(r"^submit (\S+)(.*?)(\s+#.*)?$")


@dataclass(frozen=True)
class ClusterBlock:
    prelude: str  # packaging, exports and the submit function, before the first example invocation
    invocations: Mapping[str, str]  # job -> the README's own `submit <job> ...` line, comment removed

    def script(
        self,
        job: str,
        extra_args: Sequence[str],
        values: Mapping[str, str],
        master_url: str,
        jars: Sequence[Path],
    ) -> str:
        """The bash script that runs the README's `submit <job>` line with ``extra_args`` appended."""
        prelude = _replace_exports(self.prelude, values)
        assert PLACEHOLDER_MASTER in prelude, f"README's submit no longer names {PLACEHOLDER_MASTER}"
        assert _PACKAGES.search(prelude), "README's submit no longer passes --packages"
        prelude = prelude.replace(PLACEHOLDER_MASTER, master_url)
        prelude = _PACKAGES.sub(lambda _: "--jars " + shlex.quote(",".join(map(str, jars))), prelude)
        return f"{prelude}\n{self.invocations[job]} {shlex.join(extra_args)}\n"

    def options(self, job: str) -> list[str]:
        """The options README's `submit <job>` line gives the job (what follows the job's name)."""
        return shlex.split(self.invocations[job])[2:]


def cluster_block(text: str | None = None) -> ClusterBlock:
    """The first ```bash block of the section, split at its first `submit <job>` line; after it,
    only `submit <job> ...` lines and comment lines."""
    text = README.read_text() if text is None else text
    section = text[text.index(SECTION) :]
    start = section.index("```bash\n") + len("```bash\n")
    lines = section[start : section.index("```", start)].splitlines()
    first = next(i for i, line in enumerate(lines) if _INVOCATION.match(line))
    invocations = {}
    for line in lines[first:]:
        if not line.strip() or line.lstrip().startswith("#"):  # a comment between the examples
            continue
        match = _INVOCATION.match(line)
        assert match, f"README's cluster block ends with something other than submit lines: {line!r}"
        invocations[match.group(1)] = f"submit {match.group(1)}{match.group(2)}".rstrip()
    return ClusterBlock("\n".join(lines[:first]), invocations)


def _replace_exports(prelude: str, values: Mapping[str, str]) -> str:
    out = []
    for line in prelude.splitlines():
        match = _EXPORT.match(line)
        if match:
            names = [assignment.split("=", 1)[0] for assignment in match.group(1).split()]
            missing = [n for n in names if n not in values]
            assert not missing, f"README exports {missing}, which the cluster tier gives no value"
            line = "export " + " ".join(f"{n}={shlex.quote(values[n])}" for n in names)
        out.append(line)
    return "\n".join(out)
