"""The built-in ``generate_image`` tool: images from a prompt, by OpenAI's Images API.

``POST {base}/images/generations`` with the images asked for as ``b64_json``, reached as
``openai:`` models are: ``model.base_url`` (else ``OPENAI_BASE_URL``, else OpenAI's), and the
key of ``model.api_key_env`` (else ``OPENAI_API_KEY``, else ``ZAGENT_API_KEY``), withheld from
tools and redacted from what is shown. Each image is saved in the call's ``output/`` folder
and attached for the model to see. Offered only when ``builtins.generate_image.model`` is set.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any

import httpx

from zagent_core.builtins.api_calls import asked
from zagent_core.config import Config, GenerateImageConfig
from zagent_core.journal.events import Media
from zagent_core.problems import Problem
from zagent_core.tools import credentials
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext, always, object_schema
from zagent_core.tools.results import ToolResult, _attachable
from zagent_core.version import zagent_version

NAME = "generate_image"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The most of an answer read: ten large images as base64 are some 40 MiB.
ANSWER_CAP = 64 * 1024 * 1024
#: What the first bytes of an image say it is.
_FORMATS = ((b"\x89PNG\r\n\x1a\n", "image/png", ".png"), (b"\xff\xd8\xff", "image/jpeg", ".jpg"),
            (b"RIFF", "image/webp", ".webp"))


def parameters(settings: GenerateImageConfig) -> dict[str, Any]:
    return object_schema({
        "prompt": {"type": "string", "minLength": 1, "maxLength": 32000,
                   "description": "What the image shows, in words."},
        "size": {"type": "string", "pattern": "^(auto|[0-9]{3,4}x[0-9]{3,4})$",
                 "description": "WIDTHxHEIGHT as the model takes it (1024x1024, 1536x1024...), or auto."},
        "n": {"type": "integer", "minimum": 1, "maximum": settings.max_images,
              "description": f"How many images (default 1, at most {settings.max_images})."},
    }, ["prompt"])


def description(settings: GenerateImageConfig) -> str:
    return ("Generate images from a prompt. Each is saved as a file (its path is answered) and attached for you "
            f"to see. At most {settings.max_images} images a call.")


def _base_url(config: Config) -> str:
    return (config.model.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


def config_problems(config: Config) -> list[Problem]:
    """No key to send: every call would fail, so it is said before."""
    if config.builtins.generate_image.model is None or credentials.take_model_key(config.model.api_key_env):
        return []
    return [Problem(source="config.json", severity="warning",
                    message="generate_image: no key for the Images API (the variable model.api_key_env names, "
                            "OPENAI_API_KEY or ZAGENT_API_KEY); its calls will fail until one is set")]


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Ask for the images, save them and attach them."""
    config = context.config
    settings = config.builtins.generate_image
    key = credentials.take_model_key(config.model.api_key_env)
    if settings.model is None or not key:
        return ToolResult(output="generate_image cannot generate: no key for the Images API (set OPENAI_API_KEY, "
                                 "or the variable model.api_key_env names); tell the user", is_error=True)
    url = f"{_base_url(config)}/images/generations"
    request: dict[str, Any] = {"model": settings.model, "prompt": arguments["prompt"], "n": arguments.get("n", 1)}
    if "size" in arguments:
        request["size"] = arguments["size"]
    # The GPT image models always answer base64 and refuse the parameter; DALL-E answers URLs unless asked.
    if not settings.model.startswith("gpt-image"):
        request["response_format"] = "b64_json"
    try:
        with httpx.Client(timeout=settings.timeout_seconds,
                          headers={"User-Agent": f"zagent/{zagent_version()} (generate_image)"}) as client:
            body = asked(client, client.build_request("POST", url, json=request,
                                                      headers={"Authorization": f"Bearer {key}"}),
                         ANSWER_CAP, f"{settings.max_images} images")
        result = _saved(context, json.loads(body))
    except httpx.TimeoutException:
        result = ToolResult(output=f"the Images API did not answer within builtins.generate_image.timeout_seconds "
                                   f"({settings.timeout_seconds:g} s)", is_error=True)
    except (httpx.HTTPError, ValueError) as exc:  # json's errors and binascii's are ValueErrors
        result = ToolResult(output=f"no image: {url}: {exc}", is_error=True)
    return result.model_copy(update={"output": credentials.redact(result.output, key, credentials.REDACTED)})


def _saved(context: BuiltinContext, answer: Any) -> ToolResult:
    """Each image of ``answer`` saved in the call's ``output/``, attached when the model can take it."""
    data = answer.get("data") if isinstance(answer, dict) else None
    images = [item for item in data if isinstance(item, dict) and isinstance(item.get("b64_json"), str)] \
        if isinstance(data, list) else []
    if not images:
        raise ValueError("its answer holds no data[].b64_json image")
    assert context.call_dir is not None, "generate_image gets a call folder (runs_process)"
    lines: list[str] = []
    media: list[Media] = []
    for number, item in enumerate(images, start=1):
        try:
            image = base64.b64decode(item["b64_json"], validate=True)
        except binascii.Error as exc:
            raise ValueError(f"image {number} is not base64 ({exc})") from None
        mime, extension = next(((m, e) for magic, m, e in _FORMATS if image.startswith(magic)), ("image/png", ".png"))
        path = context.call_dir / "output" / f"image-{number}{extension}"
        path.write_bytes(image)
        attach, why_not = _attachable(mime, len(image), context.config.capabilities, context.config.limits)
        revised = item.get("revised_prompt")
        lines.append(f"{path} ({len(image)} bytes, {mime}); " + ("attached for you to see" if attach else why_not or "")
                     + (f"\n  revised prompt: {revised}" if isinstance(revised, str) and revised else ""))
        if attach:
            media.append(Media(path=str(path), mime=mime, size=len(image)))
    return ToolResult(output="\n".join(lines), is_error=False, media=media)


TOOL = Builtin(
    name=NAME, description=description(GenerateImageConfig()), parameters=parameters(GenerateImageConfig()),
    run=run,
    # Each call writes its own folder.
    concurrency_safe=True,
    # It costs money and never gives the same images twice: a replay serves the recorded ones,
    # and a call a crash cut off is reported, not run again.
    replay="unsafe",
    # Not a process, but a folder: the images are kept in its output/.
    runs_process=always,
)


def for_config(config: Config) -> Builtin | None:
    """The tool as ``config`` sets it up; None (not offered) when no model is set."""
    settings = config.builtins.generate_image
    if settings.model is None:
        return None
    return TOOL.shaped(description(settings), parameters(settings))
