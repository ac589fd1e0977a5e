"""What the model is told of a call: the result's text, then in one line what it was and what to
do next, in words.

Measured on the golden set with a 1.5B local model (Qwen2.5-Coder-1.5B-Instruct): told as a
JSON envelope (``{"decision": …, "text": …, "note": …}``), the model proposed the identical call
again in 9 of 37 cases; told as text with a closing line, in 5 (in 1 of the 10 that had, run
again on a warm server: llama.cpp's answers vary with its prompt cache, even at temperature 0).
The price: "back up, then deploy" finished in 3 of 4 runs told in JSON, in 0 of 5 told as text.
"""

from __future__ import annotations

DONE = (
    "Done: do not make this call again. If the user asked for something more, call the tool for "
    "that; otherwise answer the user in words from this result."
)
WAITING = "Waiting for the user to confirm or reject; do not retry."
NOT_DONE = (
    "It did not succeed: do not make this same call again. Tell the user why, or correct the "
    "arguments if they were wrong."
)
REPEATED = (
    "You already made this exact call in this turn; above is its earlier result, it was not run "
    "again. Do not call it again: answer the user with this result."
)


def told(
    text: str, decision: str, *, code: str = "", task_id: str = "", note: str | None = None
) -> str:
    """``text``, a job's ``task_id`` beside it, then ``(decision, code. note)``; the note by
    default follows the decision (done, waiting for the user, or not done)."""
    lines = [text]
    if task_id:  # people read the job's name; the model may ask for its status
        lines.append(f"task_id: {task_id}")
    if note is None:
        note = {"executed": DONE, "confirmation_requested": WAITING}.get(decision, NOT_DONE)
    head = f"{decision}, {code}" if code else decision
    return "\n".join(lines) + f"\n\n({head}. {note})"


def told_again(earlier: str) -> str:
    """An identical call's answer: the first one's, and that it was not run again."""
    return f"{earlier}\n(repeated. {REPEATED})"
