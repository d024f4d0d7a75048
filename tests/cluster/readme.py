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
USER_JOB_SECTION = "## Audit your own job"
# The placeholders of README's spark-submit line for a user's job: the zip `make dist` builds, and
# the job's file.
USER_PY_FILES = "dist/offset_audit-{version}-py-files.zip"
USER_JOB_FILE = "your_job.py"
PLACEHOLDER_MASTER = "spark://master:7077"
_PACKAGES = re.compile(r"--packages \S+")
# The token provider's pair beside --packages (README: Maven Central has no 4.1.3 of it); the
# resolved jars hold the 4.1 build conf/jvm/spark/pom.xml takes, so the pair goes with --packages.
_TOKEN_PROVIDER = re.compile(r"^\s*--exclude-packages \S+ \\\n\s*--jars https://\S+ \\\n", re.MULTILINE)
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
        assert _TOKEN_PROVIDER.search(prelude), "README's submit no longer replaces the token provider"
        prelude = _TOKEN_PROVIDER.sub("", prelude.replace(PLACEHOLDER_MASTER, master_url))
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


def user_job_block(text: str | None = None) -> str:
    """README's spark-submit command for a user's job: the first ```bash block of "Audit your own
    job" (backslash-continued lines, as a shell reads them)."""
    text = README.read_text() if text is None else text
    section = text[text.index(USER_JOB_SECTION) :]
    start = section.index("```bash\n") + len("```bash\n")
    block = section[start : section.index("```", start)].strip()
    assert block.startswith("spark-submit "), f"README's user-job block is no spark-submit line: {block!r}"
    return block


def user_job_command(version: str, py_files: Path, job_file: Path, text: str | None = None) -> str:
    """README's command for a user's job with only its two placeholders replaced."""
    block = user_job_block(text)
    for placeholder in (USER_PY_FILES.format(version=version), USER_JOB_FILE):
        assert block.count(placeholder) == 1, f"README's user-job line no longer names {placeholder}"
    block = block.replace(USER_PY_FILES.format(version=version), shlex.quote(str(py_files)))
    return block.replace(USER_JOB_FILE, shlex.quote(str(job_file)))


def packages_options(command: str) -> dict[str, str]:
    """The values of a spark-submit command's --packages, --exclude-packages and --jars."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    names = ("--packages", "--exclude-packages", "--jars")
    return {w: words[i + 1] for i, w in enumerate(words) if w in names}
