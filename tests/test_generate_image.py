"""The generate_image built-in against a fake OpenAI Images endpoint on 127.0.0.1: images saved
in the call's folder and attached, the request's shape, the key sent and redacted, errors."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from local_http import QuietHandler, one_call, replay_report, scripted_run, serving
from test_fetch_url import PIXEL

from zagent_core.builtins import registry
from zagent_core.config import BuiltinsConfig, Config, GenerateImageConfig, ModelConfig
from zagent_core.tools.results import ToolResult

KEY = "sk-images-0123456789abcdef"
JPEG = b"\xff\xd8\xff\xe0" + bytes(60)


class Images:
    """What the fake endpoint was asked, and what it answers next."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.answer: bytes | None = None


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[str, Images]]:
    images = Images()

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            images.requests.append({"path": self.path, "json": body, "authorization": self.headers["Authorization"]})
            made = [PIXEL, JPEG][:body["n"]]
            answer = images.answer if images.answer is not None else json.dumps({"created": 1, "data": [
                {"b64_json": base64.b64encode(image).decode(), "revised_prompt": "A red dot."} for image in made]
            }).encode()
            self.answer(images.status, "application/json", answer)

    with serving(Handler) as (_, url):
        yield f"{url}/v1", images


@pytest.fixture
def images(endpoint: tuple[str, Images], monkeypatch: pytest.MonkeyPatch) -> Images:
    monkeypatch.setenv("TEST_IMAGES_KEY", KEY)
    found = endpoint[1]
    found.requests.clear()
    found.status, found.answer = 200, None
    return found


def generate(home_dir: Path, workspace: Path, base_url: str, arguments: dict[str, Any],
             model: str = "gpt-image-1") -> ToolResult:
    config = Config(model=ModelConfig(base_url=base_url, api_key_env="TEST_IMAGES_KEY"),
                    builtins=BuiltinsConfig(generate_image=GenerateImageConfig(model=model)))
    return one_call(home_dir, workspace, config, "generate_image", arguments)


def test_generate_image_is_offered_only_when_a_model_is_set() -> None:
    assert "generate_image" not in registry.enabled(Config())[0]
    configured = Config(builtins=BuiltinsConfig(generate_image=GenerateImageConfig(model="gpt-image-1",
                                                                                   max_images=2)))
    tool = registry.enabled(configured)[0]["generate_image"]
    assert tool.replay == "unsafe" and tool.parameters["properties"]["n"]["maximum"] == 2


def test_images_are_saved_in_the_call_folder_and_attached(home_dir: Path, workspace: Path,
                                                          endpoint: tuple[str, Images], images: Images) -> None:
    result = generate(home_dir, workspace, endpoint[0], {"prompt": "a red dot", "n": 2, "size": "1024x1024"})
    assert not result.is_error, result.output
    png, jpeg = result.media
    assert (png.mime, Path(png.path).name, Path(png.path).read_bytes()) == ("image/png", "image-1.png", PIXEL)
    assert (jpeg.mime, Path(jpeg.path).name, Path(jpeg.path).read_bytes()) == ("image/jpeg", "image-2.jpg", JPEG)
    assert Path(png.path).parent.name == "output"
    assert result.output == (f"{png.path} ({len(PIXEL)} bytes, image/png); attached for you to see\n"
                             "  revised prompt: A red dot.\n"
                             f"{jpeg.path} ({len(JPEG)} bytes, image/jpeg); attached for you to see\n"
                             "  revised prompt: A red dot.")
    (request,) = images.requests
    assert request["path"] == "/v1/images/generations" and request["authorization"] == f"Bearer {KEY}"
    assert request["json"] == {"model": "gpt-image-1", "prompt": "a red dot", "n": 2, "size": "1024x1024"}


def test_dall_e_is_asked_for_base64(home_dir: Path, workspace: Path, endpoint: tuple[str, Images],
                                   images: Images) -> None:
    generate(home_dir, workspace, endpoint[0], {"prompt": "a red dot"}, model="dall-e-3")
    assert images.requests[0]["json"] == {"model": "dall-e-3", "prompt": "a red dot", "n": 1,
                                          "response_format": "b64_json"}


def test_an_error_is_said_with_the_key_redacted(home_dir: Path, workspace: Path, endpoint: tuple[str, Images],
                                               images: Images) -> None:
    images.status, images.answer = 401, f'{{"error": {{"message": "Incorrect API key provided: {KEY}"}}}}'.encode()
    result = generate(home_dir, workspace, endpoint[0], {"prompt": "a red dot"})
    assert result.is_error and KEY not in result.output
    assert result.output == (f"no image: {endpoint[0]}/images/generations: it answered HTTP 401: "
                             '{"error": {"message": "Incorrect API key provided: [redacted]"}}')


@pytest.mark.parametrize(("answer", "said"), [
    (b'{"data": []}', "its answer holds no data[].b64_json image"),
    (b'{"data": [{"b64_json": "not base64!"}]}', "image 1 is not base64"),
])
def test_an_answer_without_images_is_an_error(home_dir: Path, workspace: Path, endpoint: tuple[str, Images],
                                              images: Images, answer: bytes, said: str) -> None:
    images.answer = answer
    result = generate(home_dir, workspace, endpoint[0], {"prompt": "a red dot"})
    assert result.is_error and result.output.startswith(f"no image: {endpoint[0]}/images/generations: {said}")


def test_without_a_key_the_config_is_warned_of(home_dir: Path, workspace: Path, endpoint: tuple[str, Images],
                                       images: Images, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TEST_NO_IMAGES_KEY", "OPENAI_API_KEY", "ZAGENT_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    config = Config(model=ModelConfig(base_url=endpoint[0], api_key_env="TEST_NO_IMAGES_KEY"),
                    builtins=BuiltinsConfig(generate_image=GenerateImageConfig(model="gpt-image-1")))
    assert [p.message for p in registry.enabled(config)[1]] == [
        "generate_image: no key for the Images API (the variable model.api_key_env names, OPENAI_API_KEY or "
        "ZAGENT_API_KEY); its calls will fail until one is set"]


def test_through_the_cli_the_model_sees_the_image_and_a_replay_serves_it(
        home_dir: Path, tmp_path: Path, endpoint: tuple[str, Images], images: Images) -> None:
    (home_dir / "config.json").write_text(json.dumps({
        "model": {"base_url": endpoint[0], "api_key_env": "TEST_IMAGES_KEY"},
        "builtins": {"generate_image": {"model": "gpt-image-1"}}}))
    session_id, (finished,) = scripted_run(home_dir, tmp_path / "script.json", [
        {"name": "generate_image", "arguments": {"prompt": "a red dot"}}], "Here is your dot.")
    (media,) = finished.media
    assert media.mime == "image/png" and Path(media.path).read_bytes() == PIXEL
    report = replay_report(home_dir, session_id)
    assert report["not_rerun"] == [f"generate_image ({finished.call_id})"] and report["differences"] == [], report
    assert len(images.requests) == 1  # served, not made again
