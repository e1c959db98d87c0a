#!/usr/bin/env bash
# Each mutant of this folder (a patch breaking one promise of the product) applied to the work tree
# in turn, the test files that must catch it run as scripts/test runs them (-n 4, loadgroup, one
# rerun), and the patch taken back off. A mutant the tests pass is named and fails the script: a
# promise nothing would see broken. Run from a work tree whose product files are unchanged:
#   bench/mutants/run.sh                      every mutant once
#   RUNS=5 bench/mutants/run.sh own-key-not-written-over
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"
RUNS=${RUNS:-1}
declare -A CATCHERS=(
    [own-key-not-written-over]="tests/provisioner_client/test_scope_writes.py tests/sites/test_site_client.py"
    [rollout-slot-freed-as-the-action-starts]="tests/provisioner_client/test_rollout.py tests/provisioner_client/test_rollout_reconcile.py tests/rollouts/test_rollout_budget.py"
    [node-writes-every-applied-key]="tests/isolation/test_isolation.py tests/isolation/test_own_keys_isolation.py tests/registry/access/test_grants.py"
    [env-file-0644]="tests/provisioner_client/test_envfile.py tests/provisioner_client/test_drift.py tests/provisioner_client/test_own_files.py"
    [quota-guard-never-cuts-back]="tests/limits/test_quotas.py tests/provisioner/test_quota_bounds.py"
    [site-copy-skips-the-first-write]="tests/sites/test_site_seat.py tests/provisioner/test_site_copies.py tests/provisioner/test_site_resets.py"
    [node-drops-a-write]="tests/sites/test_site_client.py tests/provisioner_client/test_scope_writes.py"
)
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(printf '%s\n' "${!CATCHERS[@]}" | sort)
survivors=()
for name in "${names[@]}"; do
    patch="bench/mutants/$name.patch"
    [ -n "${CATCHERS[$name]:-}" ] && [ -f "$patch" ] || { echo "no mutant named $name" >&2; exit 2; }
    git apply "$patch"
    trap 'git apply -R "$patch"' EXIT
    for run in $(seq "$RUNS"); do
        log="${TMPDIR:-/tmp}/mutant-$name.log"
        status=0
        # shellcheck disable=SC2086 # the test files, one word each
        pytest ${CATCHERS[$name]} -n 4 -p no:cacheprovider --dist loadgroup --reruns 1 -q >"$log" 2>&1 || status=$?
        case $status in
            0) echo "SURVIVED $name (run $run of $RUNS): ${CATCHERS[$name]}" && survivors+=("$name") ;;
            1) echo "caught $name (run $run of $RUNS):" && grep '^FAILED' "$log" | sed 's/^/    /' ;;
            *) echo "$name: pytest could not run the tests (exit $status), see $log" >&2 && exit 2 ;;
        esac
    done
    git apply -R "$patch"
    trap - EXIT
done
[ ${#survivors[@]} -eq 0 ] || { echo "mutants the tests passed: ${survivors[*]}" >&2; exit 1; }
