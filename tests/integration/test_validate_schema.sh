# test_validate_schema.sh - configs/job.schema.json and the parser describe the same spec.
#
# The schema's key paths must equal the parser's (`dtrain validate --list-keys`,
# printed from the key tables), and every job spec in configs/ and examples/
# (*.yaml, recursively; Kubernetes manifests, which have apiVersion and kind,
# are not job specs and are skipped) must pass both the schema (Python's
# jsonschema, YAML read as YAML 1.2 like libyaml and editors do) and
# `dtrain validate`.  A few bad specs must fail both, so neither is vacuous.
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/../.."

if ! python3 -c 'import jsonschema, yaml' 2>/dev/null; then
  not_ok "python3 has jsonschema and yaml (scripts/install-deps.sh installs them)"
  exit 1
fi

cat > "$T/check.py" <<'PY'
import json, re, sys, yaml, jsonschema

class Yaml12(yaml.SafeLoader):
    """YAML 1.2 core scalars: only true/false are booleans; 1e-3 is a number."""
Yaml12.yaml_implicit_resolvers = {
    k: [r for r in v if r[0] not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
                                     "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp")]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
Yaml12.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
Yaml12.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
Yaml12.add_implicit_resolver("tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"), list("-+0123456789."))

schema = json.load(open("configs/job.schema.json"))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)

def resolve(node):
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].split("/")[-1]]
    return node

def paths(node, prefix):
    node = resolve(node)
    for name, sub in node.get("properties", {}).items():
        path = prefix + name
        yield path
        sub = resolve(sub)
        if "properties" in sub:
            yield from paths(sub, path + ".")
        elif sub.get("type") == "array" and "properties" in resolve(sub.get("items", {})):
            yield from paths(sub["items"], path + "[].")

if sys.argv[1] == "keys":
    print("\n".join(sorted(paths(schema, ""))))
    sys.exit(0)
for path in sys.argv[2:]:
    data = yaml.load(open(path), Loader=Yaml12)
    if isinstance(data, dict) and "apiVersion" in data and "kind" in data:
        print("skip", path)
        continue
    data = json.loads(json.dumps(data))  # keys as JSON has them: on_exit {42: ...} -> "42"
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.path))
    print("ok" if not errors else "bad", path, "; ".join(e.message[:200] for e in errors[:3]))
PY

"$DTRAIN" validate --list-keys | sort > "$T/parser.keys"
python3 "$T/check.py" keys > "$T/schema.keys"
if diff -u "$T/schema.keys" "$T/parser.keys" > "$T/keys.diff"; then
  ok "schema and parser know the same $(wc -l < "$T/parser.keys") key paths"
else
  not_ok "schema and parser know the same key paths (- schema only, + parser only)"
  sed 's/^/    /' "$T/keys.diff"
fi
check "the key list is not empty" test "$(wc -l < "$T/parser.keys")" -gt 100

specs=$(find configs examples -name '*.yaml' ! -name '*.k8s.yaml' 2>/dev/null | sort)  # *.k8s.yaml: rendered Kubernetes manifests, not job specs
check "configs/ holds job specs to check" test -n "$specs"
for f in $specs; do
  line=$(python3 "$T/check.py" files "$f")
  case "$line" in
    skip*) continue ;;
    ok*) ok "$f passes the JSON Schema" ;;
    *) not_ok "$f passes the JSON Schema: $line" ;;
  esac
  expect_status 0 "$f passes dtrain validate" "$DTRAIN" validate "$f"
done

# Bad specs: both checkers must refuse each (the schema is not vacuous).
i=0
while IFS= read -r spec; do
  i=$((i + 1))
  printf '%b' "$spec" > "$T/bad$i.yaml"
  line=$(python3 "$T/check.py" files "$T/bad$i.yaml")
  case "$line" in bad*) ok "schema refuses bad spec $i" ;; *) not_ok "schema refuses bad spec $i: $spec" ;; esac
  expect_status 2 "dtrain validate refuses bad spec $i" "$DTRAIN" validate "$T/bad$i.yaml"
done <<'BAD'
name: t\nnproc_pernode: 4\ncommand: [a]\n
command: [a]\n
name: t\ncommand: [a]\ntrainer: {}\n
name: Bad_Name\ncommand: [a]\n
name: t\ncommand: [a]\nrendezvous: {timeout: abc}\n
name: t\ncommand: [a]\nbackend: mpi\n
name: t\ntrainer: {scheduler: {type: onecycle}}\n
name: t\ntrainer: {optimizer: {betas: [0.9, 1.0]}}\n
name: t\ncommand: [a]\nkubernetes: {namespace: x}\n
name: t\ncommand: [a]\nrestart_policy: {on_exit: {42: stop}}\n
name: t\ntrainer: {amp: {dtype: fp8}}\n
name: t\ncommand: [a]\nslurm: {exclusive: yes}\n
BAD
