"""AVI-Bench's "refine" step: an LLM rewrites each free-form reply into the form its task's scorer
reads, reproduced from FudanCVL/AVI-Bench ``auto_format/run.py`` (prompts, per-task dispatch,
``clean_json_output``) and ``auto_format/agent_format.py`` (one user message, no generation
settings: the gateway's defaults; the official default model is gemini-2.5-flash).

Task families: retrieval (AVR, VAR) -> an index list; AVLG -> ``{"frame_0": [...], ...}``; AVL ->
``{"<category>_<n>": "[...]"}``; AMIC/VMIC -> ``{"class": "count"}``; the QA tasks (ASQA, VSQA_I,
VSQA_V, AVSQA, AVQA) -> the bare final answer, with a per-task instruction; AVM, AVC, AVH, VAH are
not refined. The JSON families' judge replies go through ``clean_json_output``; QA replies are kept
as the judge wrote them. ``auto_format/utils.py`` builds the QA prompt's question with
``get_real_input``, which is ``avibench.text_input`` (its ``definitions`` import is assumed to be the
evaluator's ``definitions.py``, the only copy released).

Departure: officially a refine request that keeps failing leaves the model's raw reply in place,
to be scored as if refined; here ``refine_reply`` raises the judge's ``JudgeError`` so the entry
becomes an error row.
"""

from __future__ import annotations

from collections.abc import Mapping

from ....judge import Judge, JudgeSettings
from .rules import text_input

PROMPT_RETRIEVAL = """
Please convert the provided text into a specific dictionary format.
The format should consist a list of indices.
For example, if given the input ```python [0, 1, 3, 7, 8]```, which means the index selected, it should maintain that structure.
The output should always be in the form of a list with numeric values represented for selected indices, any non-numeric values should be removed.
Make sure to convert them into the specified format accurately.
Now, the provided text is: MODEL_MSG. Your refined output is: ```json
"""

PROMPT_AVLG = """
You are a helpful assistant dedicated to formatting outputs from other models according to specific guidelines.
### Requirements:
1. Convert the output into JSON format with the following structure:
```json
{
    "frame_0": [0.1, 0.11, 0.21, 0.14],
    "frame_1": [0.2, 0.3, 0.4, 0.12],
    ...
    "frame_9": [0.22, 0.31, 0.2, 0.11]
}
```
2. If a frame is missing a complete bounding box (e.g., `[0.22, 0.31, 0.2, `), set that frame's bounding box to `[]`. For example, change `'frame_5': [0.22, 0.31, 0.2,` to `'frame_5': []`.
3. If the bounding boxes contain invalid values (e.g., letters like in `[x_y, 010, xy, yy]`, `[x_1, y_1, w_1, h_1]`, or similar), set that frame's bounding box to `[]`. For instance, change `'frame_5': [x_4, y_4, w_4, h_4]` to `'frame_5': []`.
4. If the input contains more than 10 frames, remove any excess frames, ensuring only frames from `frame_0` to `frame_9` are included.
5. Ensure that the output includes frames from `frame_0` to `frame_9`, and that all bounding boxes contain only numeric values.
Now, the output content from the other model is: `MODEL_MSG`. Your refined output is: ```json
"""

PROMPT_AVL = """
You are a helpful assistant designed to format outputs from other models according to specific requirements.
### Requirements:
1. Convert the output into JSON format with the following structure:
    ```json
    {
        "banjo_1": "[0.1, 0.11, 0.21, 0.14]",
        "guitar_2": "[0.2, 0.3, 0.4, 0.12]",
        "guitar_3": "[0.22, 0.31, 0.2, 0.11]"
    }
```
2. Ensure that the output includes object category, corresponding instance id, and that the bounding boxes only contain numeric values.
Now, the output content from the other model is: `MODEL_MSG`. Your refined output is: ```json
"""

PROMPT_MIC = """
Please convert the provided text into a specific dictionary format.
The format should consist of objects as keys and their corresponding instance counts as values.
For example, if given the input ```json{"bird": "1", "man": "2"}```, it should maintain that structure.

If the content is in plain text, such as "a dog is barking, and two men are walking,"
extract the objects and count their occurrences to present them in the same dictionary format, e.g., ```json{"dog": "1", "man": "2"}```
The output should always be in the form of a JSON-like dictionary with string values representing counts.

Please also note thay the key should contain only one-word, i.e., if the key is "black dog" and "old woman", please convert as "dog" and "man".

Make sure to identify various objects in the text, and convert them into the specified format accurately.
Now, the provided text is: MODEL_MSG. Your refined output is: ```json
"""

PROMPT_QA = """
You are an excellent information extraction expert, helping me extract the actual answers represented from the cluttered outputs of a model cluster.
The content provided to you consists of three parts:
- The original information received by the model cluster, namely the question, enclosed with [>original_question] original question [original_question<].
- The responses from the model cluster to the original question, enclosed with [>original_responses] original_responses [original_responses<]; these responses are very verbose, containing reasoning, explanations, and answers, but we only need the final answer.
- A prompt regarding the content you are expected to output, enclosed with [>what_you_should_do] what_you_should_do [what_you_should_do<].
Now, I will provide you with the above information:
[>original_question] x_original_question [original_question<]
[>original_responses] x_original_responses [original_responses<]
[>what_you_should_do] x_what_you_should_do [what_you_should_do<]
If you cannot find the answer, you should response with "i dont know".
Note, please do not explain, just give the final answer enclosed with ** **, e.g., **the answer is ...**.
Now, please analysis the original question and original_responses, reference what_you_should_do, you can extract the correct answer=
"""

_NUMBER = ('The answer should be a number, if the original answer is of English, convert it into a number. '
           'e.g., "because... the answer is four" -> "**4**". ')
_QUANTITY_OR_OPTION = (
    'If the question is about the quantity, the final answer should be a number, if the original answer is of '
    'English, convert it into a number. e.g., "because... the answer is four" -> "**4**". '
    'Else, the final answer should be the selected option without any explain, e.g., "the left is small, the righ '
    'is big, so the answer is big" -> "**right**"'
)
QA_INSTRUCTIONS = {
    "ASQA:beats_counting": _NUMBER,
    "ASQA": 'Only remain the correct answer/option, remove all of other redundant words. e.g., "because... the '
            'first... the second... the answer is second." -> "**second**"',
    "VSQA_I": _QUANTITY_OR_OPTION, "VSQA_V": _QUANTITY_OR_OPTION, "AVSQA": _QUANTITY_OR_OPTION, "AVQA": _QUANTITY_OR_OPTION,
}
# family -> (prompt, stand-in for a missing reply); QA has its own builder
JSON_FAMILIES = {
    "retrieval": (PROMPT_RETRIEVAL, "[]"), "avlg": (PROMPT_AVLG, "[]"), "avl": (PROMPT_AVL, "{}"), "mic": (PROMPT_MIC, "{}"),
}
FAMILY_OF = {"AVR": "retrieval", "VAR": "retrieval", "AVLG": "avlg", "AVL": "avl", "AMIC": "mic", "VMIC": "mic",
             "ASQA": "qa", "VSQA_I": "qa", "VSQA_V": "qa", "AVSQA": "qa", "AVQA": "qa"}
NOT_REFINED = ("AVM", "AVC", "AVH", "VAH")


def refine_prompt(entry: Mapping, reply: str | None) -> str | None:
    """The refine request for ``reply`` to ``entry`` (``None`` when its task is not refined). A
    missing reply is refined too, as officially: ``"[]"``/``"{}"`` for the JSON families, ``"i dont
    know"`` for QA."""
    family = FAMILY_OF.get(entry["task"])
    if family is None:
        if entry["task"] in NOT_REFINED:
            return None
        raise ValueError(f"AVI-Bench task {entry['task']!r} has no refine rule; the tasks are {sorted(FAMILY_OF) + list(NOT_REFINED)}")
    if family != "qa":
        prompt, missing = JSON_FAMILIES[family]
        return prompt.replace("MODEL_MSG", str(reply if reply is not None else missing))
    instruction = QA_INSTRUCTIONS.get(f"{entry['task']}:{entry.get('subtask')}", QA_INSTRUCTIONS[entry["task"]])
    prompt = PROMPT_QA.replace("x_original_question", text_input(entry))
    prompt = prompt.replace("x_what_you_should_do", instruction)
    return prompt.replace("x_original_responses", str(reply if reply is not None else "i dont know"))


def clean_json_output(text: str | None) -> str:
    """``clean_json_output``: drop code fences, newlines, four-space runs; ``"`` becomes ``'`` and
    ``null`` becomes ``[]``; a leading ``answer=`` is stripped."""
    if text is None:
        return ""
    text = text.replace("```json", "").replace("```", "")
    text = text.replace("\n", "").replace('"', "'").replace("    ", "")
    text = text.replace("null", "[]")
    stripped = text.lstrip()
    if stripped.lower().startswith("answer="):
        text = stripped.split("=", 1)[1].lstrip()
    return text


def refine_reply(judge: Judge, entry: Mapping, reply: str | None) -> str | None:
    """The refined reply, as the evaluator reads it: the judge's answer to ``refine_prompt`` (cleaned
    for the JSON families), or ``reply`` itself for a task that is not refined. A judge that keeps
    failing raises ``JudgeError``."""
    prompt = refine_prompt(entry, reply)
    if prompt is None:
        return reply
    answer = judge.complete([{"role": "user", "content": prompt}], JudgeSettings())
    return answer if FAMILY_OF[entry["task"]] == "qa" else clean_json_output(answer)
