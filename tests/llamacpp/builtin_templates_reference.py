"""llama.cpp's built-in chat templates (`llama-server --chat-template NAME`) rendered by llama.cpp itself, the
reference of the built-in templates' test (engines/src/text/chat/builtin.rs). Compiles builtin_templates.cpp
against src/llama-chat.cpp of the llama.cpp that tests/llamacpp/fetch-vocabs.sh fetches (llama-cpp-python 0.3.36's
vendored copy; a C++17 compiler is all it needs) and writes JSON {"conversations": [...], "prompts": {name:
[[without, with generation prompt], ...]}} to stdout.

    python3 tests/llamacpp/builtin_templates_reference.py > engines/tests/data/llamacpp-builtin-templates.json
"""
import json
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
VENDOR = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
CONVERSATIONS = [
    [["user", "Hello"]],
    [["system", "You are a helpful assistant"], ["user", "Hello"]],
    [["system", " Be brief. "], ["user", " Hi there "], ["assistant", " Hello! How can I help? "],
     ["user", "Tell me a joke."]],
    [["user", "One"], ["assistant", "Two"], ["user", "Three"], ["assistant", "Four"]],
    [["system", "S"], ["user", "Q"], ["assistant", "A"], ["tool", "T"], ["user", "Q2"]],
]


def main():
    vocabs = subprocess.run(["bash", str(HERE / "fetch-vocabs.sh")], check=True, capture_output=True, text=True)
    sdist = pathlib.Path(vocabs.stdout.strip()).parent / "llama_cpp_python-0.3.36.tar.gz"
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(sdist) as tar:
        wanted = [m for m in tar.getmembers()
                  if m.name.startswith(VENDOR) and re.match(r"(src/llama-chat\.|include/|ggml/include/)",
                                                            m.name[len(VENDOR):])]
        tar.extractall(tmp, members=wanted, filter="data")
        root = pathlib.Path(tmp) / VENDOR
        source = (root / "src/llama-chat.cpp").read_text()
        table = source[source.index("LLM_CHAT_TEMPLATES"):]
        names = re.findall(r'\{\s*"([^"]+)",\s*LLM_CHAT_TEMPLATE_', table[:table.index("};")])
        driver = pathlib.Path(tmp) / "driver"
        subprocess.run(["g++", "-std=c++17", "-O1", f"-I{root / 'src'}", f"-I{root / 'include'}",
                        f"-I{root / 'ggml/include'}", str(HERE / "builtin_templates.cpp"),
                        str(root / "src/llama-chat.cpp"), "-o", str(driver)], check=True)
        lines = "\n".join("\t".join(f for m in c for f in m) for c in CONVERSATIONS) + "\n"
        out = subprocess.run([str(driver), *names], input=lines, check=True, capture_output=True, text=True).stdout
    prompts = {}
    for line in out.splitlines():
        name, conversation, flag, prompt = line.split("\t", 3)
        if conversation == "-":
            continue
        prompt = None if prompt == "-" else re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], prompt)
        prompts.setdefault(name, [[None, None] for _ in CONVERSATIONS])[int(conversation)][int(flag)] = prompt
    json.dump({"conversations": CONVERSATIONS, "prompts": prompts}, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
