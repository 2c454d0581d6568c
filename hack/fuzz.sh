#!/usr/bin/env bash
# Runs every fuzz target of the module for a while: `hack/fuzz.sh 3s light` (make test:
# the targets whose package, its tests included, does not import k8s.io/kubernetes, whose
# instrumented build takes minutes: kube/workload's tests start a control plane, and its
# target alone cost a cold make test about five minutes of building) or `hack/fuzz.sh 2m all` (make fuzz). Go fuzzes one target per run, so
# this walks them one by one; a crasher is saved under the package's testdata/fuzz and
# fails the run, and from then on `go test` replays it as a regression case.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-3s}
which=${2:-light}
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for file in $(git ls-files '*_test.go'); do
	dir=./$(dirname "$file")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing.F).*/\1/p' "$file"); do
		# grep reads all of go list's output: with -q it would stop at the first match,
		# go list would die of SIGPIPE, and pipefail would make the test false.
		if [ "$which" = light ] && go list -deps -test "$dir" | grep '^k8s.io/kubernetes/' >/dev/null; then
			echo "fuzz $dir $target: skipped here (make fuzz runs it)"
			continue
		fi
		echo "fuzz $dir $target for $time"
		corpus=$dir/testdata/fuzz/$target
		before=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
		for attempt in 1 2 3; do
			if go test "$dir" -run '^$' -fuzz "^${target}\$" -fuzztime "$time" >"$log" 2>&1; then
				break
			fi
			after=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
			# Go before 1.27 can fail a target at the end of -fuzztime with a bare
			# "context deadline exceeded" and no input at fault (go.dev/issue/75804: the
			# coordinator reads its deadline before the workers' context is cancelled).
			# That, with no crasher written, is run again; anything else fails.
			if [ "$after" = "$before" ] && [ "$attempt" -lt 3 ] &&
				grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"; then
				echo "fuzz $dir $target: the fuzz coordinator's deadline race (go.dev/issue/75804), no input failed; again"
				continue
			fi
			tail -n 30 "$log"
			status=1
			break
		done
	done
done
exit $status
