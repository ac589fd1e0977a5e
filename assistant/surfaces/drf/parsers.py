"""The request bodies the REST API reads: JSON everywhere, HTML forms where a browser posts one.

Every body is read whole under ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (``413 request_too_large``) and
``DATA_UPLOAD_MAX_NUMBER_FIELDS`` (``400 bad_request``); one that cannot be read is a ``400
parse_error``; what a body holds is refused, never repaired (no bytes silently replaced).
"""

from __future__ import annotations

import io
import re
from typing import Any
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent
from django.core.files.uploadhandler import FileUploadHandler
from django.http import QueryDict
from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from rest_framework import exceptions
from rest_framework.parsers import (
    BaseParser,
    DataAndFiles,
    FormParser,
    JSONParser,
    MultiPartParser,
)

# A "%" not followed by two hex digits: browsers never send one; parsers disagree on its meaning.
BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


class AssistantJSONParser(JSONParser):
    """DRF's JSON parser, with a body nested past the interpreter's depth a 400, not a 500."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError(
                "JSON parse error - the body is nested too deeply."
            ) from None


def _encoding(parser_context: Any) -> str:
    request = (parser_context or {}).get("request")
    return (getattr(request, "encoding", None) if request else None) or settings.DEFAULT_CHARSET


class AssistantFormParser(FormParser):
    """``application/x-www-form-urlencoded``, decoded strictly: a broken ``%`` escape or bytes
    that are not text in the body's charset are a ``parse_error``, not replaced characters."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        encoding = _encoding(parser_context)
        try:
            text = stream.read().decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.ParseError(
                "Form parse error - send non-ASCII characters %-encoded."
            ) from None
        if BAD_PERCENT.search(text):
            raise exceptions.ParseError("Form parse error - a % not followed by two hex digits.")
        try:
            pairs = parse_qsl(
                text,
                keep_blank_values=True,
                encoding=encoding,
                errors="strict",
                max_num_fields=settings.DATA_UPLOAD_MAX_NUMBER_FIELDS,
            )
        except UnicodeDecodeError:
            raise exceptions.ParseError(
                f"Form parse error - a value is not {encoding} text."
            ) from None
        except LookupError:
            raise exceptions.ParseError(f"Form parse error - unknown charset {encoding}.") from None
        except ValueError:  # more fields than DATA_UPLOAD_MAX_NUMBER_FIELDS
            raise TooManyFieldsSent("Too many form fields.") from None
        data = QueryDict(mutable=True, encoding=encoding)
        for key, value in pairs:
            data.appendlist(key, value)
        data._mutable = False
        return data


class _NoFiles(FileUploadHandler):
    """Refuses a file part: every field here is text."""

    def new_file(self, field_name: str, *args: Any, **kwargs: Any) -> None:
        raise exceptions.ValidationError({field_name: ["Send text here, not a file."]})

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        return None

    def file_complete(self, file_size: int) -> None:
        return None


class AssistantMultiPartParser(MultiPartParser):
    """``multipart/form-data`` with text fields only: the body read whole under the same limit as
    JSON's, a file part a 400 ``invalid`` naming its field, bytes that are not text refused."""

    def parse(
        self, stream: Any, media_type: Any = None, parser_context: Any = None
    ) -> DataAndFiles[Any, Any]:
        request = (parser_context or {})["request"]
        encoding = _encoding(parser_context)
        body: bytes = request._request.body  # RequestDataTooBig past DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            text = body.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            raise exceptions.ParseError(
                f"Multipart form parse error - not {encoding} text."
            ) from None
        meta = {**request.META, "CONTENT_TYPE": media_type, "CONTENT_LENGTH": str(len(body))}
        try:
            parser = DjangoMultiPartParser(meta, io.BytesIO(body), [_NoFiles()], encoding)
            data, files = parser.parse()
        except MultiPartParserError as exc:
            raise exceptions.ParseError(f"Multipart form parse error - {exc}") from None
        replaced = "\ufffd" not in text and any(
            "\ufffd" in key or any("\ufffd" in value for value in values)
            for key, values in data.lists()
        )
        if replaced:  # a base64 part that decodes to bytes that are not text
            raise exceptions.ParseError(f"Multipart form parse error - not {encoding} text.")
        return DataAndFiles(data, files)


# What the views read: a browser form (an HTML form, htmx, Django's test client) is as welcome as
# JSON where its flat text fields say all there is to say.
BODY_PARSERS: list[type[BaseParser]] = [
    AssistantJSONParser,
    AssistantFormParser,
    AssistantMultiPartParser,
]
# Where a value is typed or nested JSON (a tool's entities, a validation task's rules), which a
# form would flatten to text: JSON only (415 unsupported_media_type otherwise).
JSON_ONLY: list[type[BaseParser]] = [AssistantJSONParser]
