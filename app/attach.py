"""Where `attach` was imported from before it moved beside the other writers of a run
(`app.stream.attach`): the same public names, for the jobs that import them from here.

The public API is `app.audit`; this module only keeps ``from app.attach import attach`` working.
"""

from __future__ import annotations

from app.stream.attach import (
    Attachment,
    GroupCommits,
    SessionAudit,
    attach,
    attach_session,
    checkpoint_root,
)

__all__ = ["Attachment", "GroupCommits", "SessionAudit", "attach", "attach_session", "checkpoint_root"]
