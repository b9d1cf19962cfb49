"""MiroVerse's vision rule: which questions need an image the text release does not carry.

Split out of :mod:`data_prep.miroverse` (whose docstring states the rule and its sources). MiroFlow marks an
attachment with a note in the question (:data:`ATTACHMENT`); the loader also uses it for non-image files.
"""

from __future__ import annotations

import re
from typing import Any

ATTACHMENT = re.compile(r"Note: An? (?P<kind>[\w ]+?) file '(?P<name>[^']*)' is associated with this task")
_IMAGE_EXT = r"(?:png|jpe?g|gif|webp|bmp|tiff?|svg|heic)"
_IMAGE_MARKER = re.compile(r"<image(?:_\d+)?>|<\|image(?:_pad)?\|>|<img\b|!\[[^\]]*\]\([^)]*\)", re.I)
_IMAGE_FILE = re.compile(rf"\.{_IMAGE_EXT}$", re.I)
_IMAGE_URL = re.compile(rf"https?://\S+?\.{_IMAGE_EXT}\b", re.I)
_VISUAL = r"(?:image|picture|photo|photograph|screenshot|diagram|illustration|chart|map)s?"
_VISUAL_PHRASES = re.compile(
    "|".join(
        (
            rf"\b(?:this|these|the (?:attached|above|below|following|given|provided|accompanying|uploaded))"
            rf" {_VISUAL}(?![-\w])",
            r"\b(?:in|from|on) the (?:image|picture|photo|photograph|screenshot|diagram|illustration)s?"
            r"(?![-\w])",
            r"\bthe (?:figure|graph|chart|diagram|map|image|picture|photo|plot) (?:below|above|shown)\b",
            r"\b(?:as |is |are )?(?:shown|depicted|pictured) (?:below|above|here|in the "
            r"(?:image|picture|photo|photograph|figure|diagram|screenshot|illustration|chart|graph))\b",
            r"\b(?:see|refer to|look at) the (?:image|picture|photo|figure|diagram|chart|graph|map)\b",
            r"\b(?:fig\.|figure) ?\d+\b",
        )
    ),
    re.IGNORECASE,
)
_VQA_CALL = re.compile(r"<tool_name>\s*visual_question_answering\s*</tool_name>")
_IMAGE_COLUMNS = ("image", "images", "image_path", "image_url")
_IMAGE_PARTS = {"image", "image_url", "input_image"}


def message_text(content: Any) -> str:
    """A message's text: the string, or its text parts joined."""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")


def vision_signal(row: dict[str, Any], messages: list[dict[str, Any]], question: str) -> str | None:
    """Name of the first vision rule (module docstring) that ``row`` meets, or None."""
    if any(row.get(col) for col in _IMAGE_COLUMNS):
        return "image_field"
    for msg in messages:
        if msg["role"] == "user" and isinstance(msg["content"], list):
            if any(isinstance(p, dict) and p.get("type") in _IMAGE_PARTS for p in msg["content"]):
                return "multimodal_content"
    if _IMAGE_MARKER.search(question):
        return "image_marker"
    note = ATTACHMENT.search(question)
    if note and (note["kind"].strip().lower() == "image" or _IMAGE_FILE.search(note["name"])):
        return "image_attachment"
    if _IMAGE_URL.search(question):
        return "image_url"
    if _VISUAL_PHRASES.search(ATTACHMENT.sub("", question)):
        return "visual_reference"
    if any(m["role"] == "assistant" and _VQA_CALL.search(message_text(m["content"])) for m in messages):
        return "vqa_tool_call"
    return None
