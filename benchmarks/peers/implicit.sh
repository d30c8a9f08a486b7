#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Recommendation quality from a log of positives: tutti train --feedback implicit against
# implicit's ALS and BPR (PyPI, installed by this script into a virtual environment) and a
# popularity baseline, on the same split and the same ranking lists (tutti writes them with
# --lists-out; implicit_quality.py reads them). Two logs: InstEval read as interactions (every
# rating one positive; ../shared/datasets/insteval.tsv) and the synthetic courses with only
# their positive rows. For each: HR@10 and NDCG@10 over 100 candidates (the held-out course and
# 99 sampled ones, the NCF protocol), the seconds each side fitted, and the seconds tutti took to
# reach ALS's HR@10 (--target). Writes everything under the output folder; asserts nothing.
#
#   bash benchmarks/peers/implicit.sh
#
# Environment: TUTTI (the tutti program, default build/apps/tutti), IMPLICIT_OUT (output folder,
# default build-peers/implicit), IMPLICIT_THREADS (default 2), TUTTI_ARGS (extra options for
# tutti train), IMPLICIT_NO_INSTALL=1 (use the python3 on the PATH as it is), IMPLICIT_K (the K
# of HR@K and NDCG@K, default 10), IMPLICIT_EVAL (sampled, the default, or full: every course a
# learner did not take is a candidate, so HR@K is the full ranking's Recall@K).
# Not part of CI (.ci/run does not call it): it downloads implicit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tutti="${TUTTI:-${root}/build/apps/tutti}"
out="${IMPLICIT_OUT:-${root}/build-peers/implicit}"
threads="${IMPLICIT_THREADS:-2}"
k="${IMPLICIT_K:-10}"
eval_lists="${IMPLICIT_EVAL:-sampled}"
read -r -a extra <<<"${TUTTI_ARGS:-}"
datasets="${root}/../shared/datasets"
[[ -x "${tutti}" ]] || { echo "implicit.sh: no tutti program at ${tutti} (build it first)" >&2; exit 1; }
mkdir -p "${out}"

py=python3
if [[ "${IMPLICIT_NO_INSTALL:-0}" != 1 ]]; then
  venv="${out}/venv"
  if [[ ! -x "${venv}/bin/python" ]]; then
    python3 -m venv "${venv}"
    "${venv}/bin/pip" install -q --upgrade pip
    "${venv}/bin/pip" install -q implicit threadpoolctl
  fi
  py="${venv}/bin/python"
fi

say() { printf '== implicit: %s\n' "$*"; }
say "$(uname -m), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); tutti $(git -C "${root}" rev-parse --short HEAD)"

run_one() {
  local name="$1"
  shift
  local dir="${out}/${name}"
  mkdir -p "${dir}"
  say "${name}: tutti train $*"
  OMP_NUM_THREADS="${threads}" "${tutti}" train "$@" --feedback implicit --holdout last \
    --ranks 1 --top-k "${k}" --eval "${eval_lists}" --lists-out "${dir}/lists" \
    --json "${dir}/tutti.json" "${extra[@]}" \
    | tee "${dir}/tutti.txt"
  say "${name}: implicit"
  "${py}" "${root}/benchmarks/peers/implicit_quality.py" "${dir}/lists" --threads "${threads}" --k "${k}" \
    --json "${dir}/peers.json" | tee "${dir}/peers.txt"
  local als
  als="$("${py}" -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print([x for x in r if x['model']=='implicit ALS'][0]['hit_rate'])" "${dir}/peers.json")"
  say "${name}: tutti train to ALS's HR@${k} ${als}"
  OMP_NUM_THREADS="${threads}" "${tutti}" train "$@" --feedback implicit --holdout last \
    --ranks 1 --eval "${eval_lists}" --target "hr@${k}=${als}" --epochs 50 --json "${dir}/tutti-target.json" "${extra[@]}" \
    --quiet | tee "${dir}/tutti-target.txt" || true
}

if [[ -f "${datasets}/insteval.tsv" ]]; then
  run_one insteval --data "${datasets}/insteval.tsv" --user-col s --item-col d
else
  say "insteval: ${datasets}/insteval.tsv not found, skipped"
fi
run_one synthetic

"${py}" - "${out}" "${k}" "${eval_lists}" <<'PY'
import json, os, sys
out, k, lists = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"\n{lists} candidate lists, K = {k}")
print(f"{'log':<10} {'model':<22} {'HR@' + k:>7} {'NDCG@' + k:>8} {'fit s':>7} {'to ALS HR s':>11}")
for name in ("insteval", "synthetic"):
    d = os.path.join(out, name)
    if not os.path.exists(os.path.join(d, "peers.json")):
        continue
    t = json.load(open(os.path.join(d, "tutti.json")))
    tr = t["ranking"]
    target = json.load(open(os.path.join(d, "tutti-target.json"))).get("target", {})
    reached = target.get("seconds") if target.get("reached") else None
    print(f"{name:<10} {'tutti (defaults)':<22} {tr['hit_rate']:7.4f} {tr['ndcg']:8.4f} "
          f"{t['seconds']:7.2f} {('%.2f' % reached) if reached is not None else 'not reached':>11}")
    for r in json.load(open(os.path.join(d, "peers.json")))["results"]:
        print(f"{'':<10} {r['model']:<22} {r['hit_rate']:7.4f} {r['ndcg']:8.4f} "
              f"{r['fit_seconds']:7.2f}")
PY
