#!/usr/bin/env bash
# Runs every fuzz target of the module for a while: `hack/fuzz.sh 3s light` (make test:
# the targets whose package does not import k8s.io/kubernetes, whose instrumented build
# takes minutes) or `hack/fuzz.sh 2m all` (make fuzz). Go fuzzes one target per run, so
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
		if [ "$which" = light ] && go list -deps "$dir" | grep -q '^k8s.io/kubernetes/'; then
			echo "fuzz $dir $target: skipped here (make fuzz runs it)"
			continue
		fi
		echo "fuzz $dir $target for $time"
		if ! go test "$dir" -run '^$' -fuzz "^${target}\$" -fuzztime "$time" >"$log" 2>&1; then
			tail -n 30 "$log"
			status=1
		fi
	done
done
exit $status
