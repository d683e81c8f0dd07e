"""The judge: requests to a local OpenAI-compatible server started here (loopback only) and to a tiny
local Hugging Face model; the cache (a rerun sends nothing), the counts, the retries, the errors."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from kvprune.harness.judge import (
    CachedJudge, CircuitBreaker, HFJudge, JudgeError, JudgeSettings, JudgeUnavailable, JudgeUnreachable, OpenAIJudge,
    RetryPolicy, TransientJudgeError, parse_judge_spec,
)
from kvprune.harness.judge.hf_local import fingerprint

QUESTION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is 2 > 1?"}]


class ChatServer:
    """A /v1/chat/completions endpoint: answers with the next scripted status (200: ``answer`` of the
    request's messages, by default the last user message echoed back upper-cased), and records every
    request it sees."""

    def __init__(self, script=None, answer=None, port: int = 0):
        self.script = list(script or [])
        self.answer = answer or (lambda messages: messages[-1]["content"].upper())
        self.seen: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                status = server.script.pop(0) if server.script else 200
                if status == 200:
                    content = server.answer(body["messages"])
                    payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
                else:
                    payload = json.dumps({"error": f"scripted {status}"})
                data = payload.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    started = []

    def start(script=None, answer=None, port: int = 0):
        started.append(ChatServer(script, answer, port))
        return started[-1]

    yield start
    for s in started:
        s.close()


def no_wait(delays):
    return RetryPolicy(attempts=3, base_delay=0.5, max_delay=10.0, sleep=delays.append)


def test_a_judgement_comes_back_and_a_rerun_is_served_from_the_cache(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-test")
    srv = server()
    spec = f"openai:{srv.url}@tiny-judge;key_env=MY_JUDGE_KEY"
    judge = parse_judge_spec(spec, cache_dir=tmp_path)
    settings = JudgeSettings(temperature=0.0, seed=42)
    assert judge.complete(QUESTION, settings) == "IS 2 > 1?"
    assert srv.seen == [{"path": "/v1/chat/completions", "auth": "Bearer sk-test",
                         "body": {"model": "tiny-judge", "messages": QUESTION, "temperature": 0.0, "seed": 42}}]
    assert judge.stats.as_dict() == {"requests": 1, "cache_hits": 0, "retries": 0, "failures": 0, "skipped": 0}

    again = parse_judge_spec(spec, cache_dir=tmp_path)  # a new process would build a new judge
    assert again.complete(QUESTION, settings) == "IS 2 > 1?"
    assert len(srv.seen) == 1 and again.stats.cache_hits == 1 and again.stats.requests == 0
    # other settings, another draw or another model are other judgements
    again.complete(QUESTION, JudgeSettings(temperature=0.0, seed=7))
    again.complete(QUESTION, settings, draw=1)
    parse_judge_spec(f"openai:{srv.url}@other", cache_dir=tmp_path).complete(QUESTION, settings)
    assert len(srv.seen) == 4
    assert [s["body"].get("seed") for s in srv.seen[1:]] == [7, 42, 42]


def test_without_a_cache_folder_every_request_goes_out_and_no_key_sends_no_header(server, monkeypatch):
    monkeypatch.delenv("KVPRUNE_JUDGE_API_KEY", raising=False)
    srv = server()
    judge = parse_judge_spec(f"openai:{srv.url}/@m")  # a trailing slash on the base URL is dropped
    judge.complete(QUESTION)
    judge.complete(QUESTION)
    assert [s["auth"] for s in srv.seen] == [None, None] and srv.seen[0]["path"] == "/v1/chat/completions"
    assert srv.seen[0]["body"] == {"model": "m", "messages": QUESTION}  # unset settings are not sent


def test_transient_failures_are_retried_with_exponential_backoff(server, tmp_path):
    srv = server([503, 429])
    delays = []
    judge = OpenAIJudge(srv.url, "m", retry=no_wait(delays))
    assert judge.complete(QUESTION) == "IS 2 > 1?"
    assert len(srv.seen) == 3 and delays == [0.5, 1.0]
    assert judge.stats.as_dict() == {"requests": 3, "cache_hits": 0, "retries": 2, "failures": 0, "skipped": 0}


def test_a_judge_that_keeps_failing_raises_after_the_bound(server, tmp_path):
    srv = server([500] * 10)
    delays = []
    judge = OpenAIJudge(srv.url, "m", cache=None, retry=no_wait(delays))
    with pytest.raises(JudgeError, match=r"failed after 3 attempts; last: .*HTTP 500"):
        judge.complete(QUESTION)
    assert len(srv.seen) == 3 and delays == [0.5, 1.0]
    assert judge.stats.as_dict() == {"requests": 3, "cache_hits": 0, "retries": 2, "failures": 1, "skipped": 0}
    # a failure is not cached: once the server recovers, the same request is asked again
    srv.script.clear()
    assert judge.complete(QUESTION) == "IS 2 > 1?"


def test_the_backoff_is_capped():
    policy = RetryPolicy(attempts=8, base_delay=1.0, max_delay=5.0, sleep=lambda s: None)
    assert [policy.delay(k) for k in range(6)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_client_errors_fail_at_once_and_say_why(server, monkeypatch):
    srv = server([400, 401])
    judge = OpenAIJudge(srv.url, "m", key_env="SOME_KEY", retry=no_wait([]))
    with pytest.raises(JudgeError, match="HTTP 400") as first:
        judge.complete(QUESTION)
    assert "failed after" not in str(first.value)
    with pytest.raises(JudgeError, match="HTTP 401.*environment variable SOME_KEY"):
        judge.complete(QUESTION)
    assert len(srv.seen) == 2 and judge.stats.failures == 2 and judge.stats.retries == 0


def test_an_unreachable_server_is_retried_then_reported(server):
    srv = server()
    url = srv.url
    srv.close()  # nothing listens on that port any more
    judge = OpenAIJudge(url, "m", retry=no_wait([]))
    with pytest.raises(JudgeError, match=f"judge openai:{url}@m failed after 3 attempts"):
        judge.complete(QUESTION)
    assert judge.stats.requests == 3 and judge.stats.failures == 1


def closed_port_url() -> str:
    """The URL of a port nothing listens on: bound to get a free one, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_refusing_endpoint_opens_the_breaker_and_later_requests_are_not_sent():
    url, delays, told = closed_port_url(), [], []
    judge = OpenAIJudge(url, "m", retry=RetryPolicy(sleep=delays.append), breaker=CircuitBreaker(on_open=told.append))
    with pytest.raises(JudgeUnavailable) as first:
        judge.complete(QUESTION)
    message = str(first.value)
    assert f"judge openai:{url}@m stopped being asked after 5 tries in a row got no reply" in message
    assert "Connection refused" in message and "--retry-errors" in message and told == [message]
    assert judge.stats.requests == 5 and sum(delays) == 1 + 2 + 4 + 8 <= 30, "five tries, 15 s of backoff in all"
    for other in ("Is 3 > 2?", "Is 4 > 3?"):  # other requests: failed at once, nothing sent, told once only
        with pytest.raises(JudgeUnavailable, match="stopped being asked"):
            judge.complete([{"role": "user", "content": other}])
    assert judge.stats.as_dict() == {"requests": 5, "cache_hits": 0, "retries": 4, "failures": 1, "skipped": 2}
    assert len(delays) == 4 and told == [message]


class ScriptedJudge(CachedJudge):
    """A backend that follows a script: an exception to raise or a reply to give, per try."""

    identity = label = "scripted"

    def __init__(self, script, attempts: int, threshold: int):
        super().__init__(retry=RetryPolicy(attempts=attempts, sleep=lambda s: None), breaker=CircuitBreaker(threshold))
        self.script = list(script)

    def _request(self, messages, settings):
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def test_the_breaker_counts_tries_in_a_row_across_requests():
    down = JudgeUnreachable("scripted: connection refused")
    judge = ScriptedJudge([down, down, down], attempts=2, threshold=3)
    with pytest.raises(JudgeError, match="failed after 2 attempts") as first:
        judge.complete(QUESTION)
    assert not isinstance(first.value, JudgeUnavailable) and judge.breaker.opened is None
    with pytest.raises(JudgeUnavailable, match="after 3 tries in a row .*connection refused"):
        judge.complete([{"role": "user", "content": "another"}])
    assert judge.stats.requests == 3


def test_any_reply_starts_the_count_again():
    down, busy = JudgeUnreachable("scripted: timed out"), TransientJudgeError("scripted: HTTP 503")
    judge = ScriptedJudge([down, down, busy, down, down, "yes", down, down, "no"], attempts=9, threshold=3)
    assert judge.complete(QUESTION) == "yes"  # two misses, a reply (503: the server is there), two misses, an answer
    assert judge.complete([{"role": "user", "content": "again"}]) == "no"
    assert judge.breaker.opened is None and judge.breaker.consecutive == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "must start with 'openai:' or 'hf:'"),
        ("gpt-4o", "must start with 'openai:' or 'hf:'"),
        ("openai:", "must start with 'openai:' or 'hf:'"),
        ("openai:http://127.0.0.1:8000/v1", "needs '<base URL>@<model>'"),
        ("openai:http://127.0.0.1:8000/v1@", "needs '<base URL>@<model>'"),
        ("openai:127.0.0.1:8000/v1@m", "must start with http:// or https://"),
        ("openai:http://h/v1@m;key=X", "option 'key=X'"),
        ("openai:http://h/v1@m;key_env=", "option 'key_env='"),
        ("openai:http://h/v1@m;key_env=not-a-name", "not an environment variable name"),
        ("openai:http://h/v1@m;timeout=soon", "not a number of seconds"),
        ("openai:http://h/v1@m;timeout=0", "timeout must be > 0"),
        ("openai:http://h/v1@m;timeout=5;timeout=6", "given twice"),
        ("hf:", "must start with 'openai:' or 'hf:'"),
        ("hf:;device=cpu", "hf: needs a model folder"),
        ("hf:/nowhere/model", "has no config.json"),
        ("hf:/nowhere/model;temperature=1", "option 'temperature=1'"),
    ],
)
def test_malformed_specs_are_refused_with_the_expected_form(spec, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_judge_spec(spec)
    if "config.json" not in message:
        assert "expected one of: openai:<base URL>@<model>" in str(error.value)


def test_bad_messages_are_refused_before_any_request(server):
    srv = server()
    judge = OpenAIJudge(srv.url, "m")
    for bad in ([], "hi", [{"role": "user"}], [{"role": "robot", "content": "x"}], [{"role": "user", "content": 3}]):
        with pytest.raises(ValueError, match="message|non-empty list"):
            judge.complete(bad)
    assert srv.seen == [] and judge.stats.requests == 0


# -- a tiny local model ------------------------------------------------------------------------------

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tiny_judge_folder(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.support.tiny_processors import BASE, word_tokenizer

    folder = tmp_path_factory.mktemp("tiny-judge")
    tokenizer = word_tokenizer(BASE)
    tokenizer.chat_template = TEMPLATE
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_tiny_local_model_answers_greedily_and_is_cached(tiny_judge_folder, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    judge = parse_judge_spec(f"hf:{tiny_judge_folder};device=cpu", cache_dir=tmp_path)
    assert isinstance(judge, HFJudge) and judge.identity == f"hf:{fingerprint(tiny_judge_folder)}"
    settings = JudgeSettings(max_tokens=6)
    reply = judge.complete(QUESTION, settings)

    # the same greedy generation, done here by hand
    tokenizer = AutoTokenizer.from_pretrained(tiny_judge_folder)
    model = AutoModelForCausalLM.from_pretrained(tiny_judge_folder).eval()
    ids = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, do_sample=False, max_new_tokens=6)
    assert reply == tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert judge.stats.requests == 1

    again = parse_judge_spec(f"hf:{tiny_judge_folder}", cache_dir=tmp_path)
    assert again.complete(QUESTION, settings) == reply
    assert again.stats.cache_hits == 1 and again._model is None  # served from the cache, never loaded
    with pytest.raises(JudgeError, match="decodes greedily"):
        again.complete(QUESTION, JudgeSettings(temperature=0.7))
    assert again.stats.failures == 1


def test_the_fingerprint_follows_the_content_not_the_place(tiny_judge_folder, tmp_path):
    import shutil

    copy = tmp_path / "moved"
    shutil.copytree(tiny_judge_folder, copy)
    assert fingerprint(copy) == fingerprint(tiny_judge_folder)
    config = json.loads((copy / "config.json").read_text())
    config["rms_norm_eps"] = 1e-5 if config.get("rms_norm_eps") != 1e-5 else 1e-6
    (copy / "config.json").write_text(json.dumps(config))
    assert fingerprint(copy) != fingerprint(tiny_judge_folder)


def test_a_folder_without_a_chat_template_is_a_clear_judge_error(tiny_judge_folder, tmp_path):
    import shutil

    copy = tmp_path / "no-template"
    shutil.copytree(tiny_judge_folder, copy)
    for name in ("chat_template.jinja", "tokenizer_config.json"):
        path = copy / name
        if name == "chat_template.jinja":
            path.unlink(missing_ok=True)
        elif path.exists():
            config = json.loads(path.read_text())
            config.pop("chat_template", None)
            path.write_text(json.dumps(config))
    with pytest.raises(JudgeError, match="no chat template"):
        HFJudge(copy).complete(QUESTION)
