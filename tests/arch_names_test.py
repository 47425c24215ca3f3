#!/usr/bin/env python3
"""An architecture is one folder (docs/models.md "Adding an architecture"): no file of runtime/, comm/, engine/,
models/ or launch/ outside models/<arch>/ includes a header of models/<arch>/ or holds a string literal that is the
architecture's name or one of its aliases (comments do not count), except models/registry.cpp, which registers
them. The architectures are the folders of models/ with an *_architecture.cpp; their names are the folder's name,
the schema's name and its aliases. Prints every breach and exits 1 when there is one.

  tests/arch_names_test.py [SOURCE_DIR]      # the tree
  tests/arch_names_test.py --self-test       # a made-up tree with two breaches: both must be found
"""
import os
import re
import sys
import tempfile

LAYERS = ("runtime", "comm", "engine", "models", "launch")
SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
REGISTRY = os.path.join("models", "registry.cpp")
# (file, literal): a literal that spells an architecture's name but means something else, and why.
EXEMPT = {
    (os.path.join("engine", "config", "config_sections.cpp"), "flux"):
        "train.timestep_sampling: flux, ai-toolkit's name of the resolution-dependent shift",
}
TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|R"([^(]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s*["<]models/([^/"<>]+)/', re.M)


def architectures(root):
    """folder -> the names it answers to (lower case)."""
    out = {}
    models = os.path.join(root, "models")
    for folder in sorted(os.listdir(models)):
        path = os.path.join(models, folder)
        if not os.path.isdir(path):
            continue
        files = [f for f in os.listdir(path) if f.endswith("_architecture.cpp")]
        if not files:
            continue
        names = {folder.lower()}
        for f in files:
            text = open(os.path.join(path, f), encoding="utf-8").read()
            for m in re.finditer(r'schema_\.name\s*=\s*"([^"]+)"', text):
                names.add(m.group(1).lower())
            for m in re.finditer(r'schema_\.aliases\s*=\s*\{([^}]*)\}', text):
                names.update(s.lower() for s in re.findall(r'"([^"]+)"', m.group(1)))
        out[folder] = names
    return out


def literals(text):
    """The string literals of C++ source outside comments, with their line numbers."""
    for m in TOKEN.finditer(text):
        token = m.group(0)
        if token.startswith("//") or token.startswith("/*") or token.startswith("'"):
            continue
        body = token[1:-1] if token.startswith('"') else token
        yield text.count("\n", 0, m.start()) + 1, body


def breaches(root):
    archs = architectures(root)
    found = []
    for layer in LAYERS:
        for directory, _, files in os.walk(os.path.join(root, layer)):
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root)
                if relative == REGISTRY:
                    continue
                parts = relative.split(os.sep)
                own = parts[1] if parts[0] == "models" and len(parts) > 2 else None
                text = open(path, encoding="utf-8", errors="replace").read()
                for m in INCLUDE.finditer(text):
                    if m.group(1) in archs and m.group(1) != own:
                        line = text.count("\n", 0, m.start()) + 1
                        found.append(f"{relative}:{line}: includes a header of models/{m.group(1)}/")
                for line, body in literals(text):
                    for folder, names in archs.items():
                        if folder == own or body.lower() not in names:
                            continue
                        if (relative, body.lower()) in EXEMPT:
                            continue
                        found.append(f'{relative}:{line}: the string "{body}" names the architecture of '
                                     f"models/{folder}/")
    return archs, found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(relative, text):
            path = os.path.join(root, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        write("models/foo/foo_architecture.cpp", 'schema_.name = "foo";\nschema_.aliases = {"foo1"};\n')
        write("models/foo/foo.h", 'const char* n = "foo";\n')
        write("models/registry.cpp", '#include "models/foo/foo_architecture.h"\nconst char* n = "foo";\n')
        write("engine/pick.cpp", '// "foo" in a comment is fine\nbool f(const std::string& s) { return s == "Foo1"; }\n')
        write("launch/cmd.cpp", '#include "models/foo/foo.h"\nconst char* help = "a \\"foo\\" quoted";\n')
        write("models/text/other.cpp", '/* "foo" */ const char* s = "food";\n')
        archs, found = breaches(root)
        expected = ["engine/pick.cpp:2:", "launch/cmd.cpp:1:"]
        ok = archs == {"foo": {"foo", "foo1"}} and len(found) == 2 and \
            all(any(f.startswith(e) for f in found) for e in expected)
        print("\n".join(found))
        print("self-test:", "ok (both breaches found, comments and other strings passed)" if ok else "FAIL")
        return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    archs, found = breaches(root)
    if found:
        print("FAIL: an architecture is named outside its folder (docs/models.md \"Adding an architecture\"):")
        print("\n".join(found))
        return 1
    print("ok: architectures", ", ".join(f"{k} ({', '.join(sorted(v))})" for k, v in archs.items()),
          "are named only in their folders and models/registry.cpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
