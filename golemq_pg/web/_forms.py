"""Reading the fields an action's form posts: each one text, storable (no NUL, no lone
surrogate) and within its bound, or a ``ValueError`` naming the field, which the action
answers with 400 before anything changes. No field is ever dropped or shortened in silence:
a value the dashboard cannot use is refused, so a filter that cannot be applied never turns
a bulk action into one on every job."""

from __future__ import annotations

from starlette.datastructures import FormData, UploadFile

from golemq_pg._validation import check_text

#: The longest value of a field no page fills with more than a word (``action``, ``all``,
#: ``confirm``).
SHORT_FIELD = 32


def form_text(form: FormData, name: str, limit: int = SHORT_FIELD) -> str | None:
    """Field ``name`` of ``form``: None when absent, else its text (as posted, not stripped).

    Raises ValueError, with the field's name, when it was posted more than once, is a file,
    holds a NUL character or a lone surrogate, or is longer than ``limit`` characters.
    """
    values = form.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise ValueError(f"{name} must be posted once")
    return _checked(name, values[0], limit)


def form_texts(form: FormData, name: str, limit: int = SHORT_FIELD) -> list[str]:
    """Every value of the repeated field ``name`` (``ids``), each checked as
    :func:`form_text` checks one."""
    return [_checked(name, value, limit) for value in form.getlist(name)]


def _checked(name: str, value: str | UploadFile, limit: int) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text, not a file")
    if len(value) > limit:
        raise ValueError(f"{name} must be at most {limit:,} characters")
    return check_text(value, name)
