#!/usr/bin/env bash
# Runs every Go fuzz target of the module, one at a time (go test -fuzz takes
# one target per run), each for FUZZTIME (default 2s).
#   tools/fuzz.sh                  # the bounded step of make test
#   FUZZTIME=5m tools/fuzz.sh      # make fuzz FUZZTIME=5m
#   FUZZ_SAVE=1 tools/fuzz.sh      # also copy what the fuzzer found into
#                                  # testdata/fuzz/<FuzzName>/ (to commit)
# A failing input is written to testdata/fuzz/<FuzzName>/ by go test itself;
# commit it with the fix so it stays a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-2s}
SAVE_MAX=${FUZZ_SAVE_MAX:-40}
cache=$($GO env GOCACHE)/fuzz
mod=$($GO list -m)

# Packages with a fuzz target, found without compiling every test package.
mapfile -t dirs < <(git ls-files --cached --others --exclude-standard '*_test.go' | xargs grep -l '^func Fuzz[A-Za-z0-9_]*(f \*testing\.F)' | xargs -n1 dirname | sort -u)
# inputs counts the committed inputs of a target (0 without a directory).
inputs() {
	if [[ -d $1 ]]; then
		find "$1" -type f | wc -l
	else
		echo 0
	fi
}

failed=0 ran=0
start=$SECONDS
for dir in "${dirs[@]}"; do
	pkg=./$dir
	mapfile -t targets < <($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
	for target in "${targets[@]}"; do
		echo "fuzz: $pkg $target for $FUZZTIME"
		ran=$((ran + 1))
		found=$(inputs "$dir/testdata/fuzz/$target")
		ok=0
		for _ in 1 2; do
			if $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/fuzz.$$.log 2>&1; then
				ok=1
				break
			fi
			# Go's fuzzer can end a run with "context deadline exceeded" when
			# -fuzztime expires mid-execution, with no failing input: that
			# says nothing of the code, so run the target once more. A real
			# failure writes its input to testdata and is never retried.
			if [[ $(inputs "$dir/testdata/fuzz/$target") != "$found" ]] ||
				! grep -q 'context deadline exceeded' /tmp/fuzz.$$.log || grep -q 'Failing input written' /tmp/fuzz.$$.log; then
				break
			fi
			echo "fuzz: $pkg $target: the fuzzer's own deadline error, no failing input; running it again"
		done
		if [[ $ok == 0 ]]; then
			tail -30 /tmp/fuzz.$$.log >&2
			echo "fuzz: $pkg $target FAILED (the input is in $dir/testdata/fuzz/$target/)" >&2
			failed=$((failed + 1))
		fi
		if [[ ${FUZZ_SAVE:-} == 1 && -d $cache/$mod/$dir/$target ]]; then
			mkdir -p "$dir/testdata/fuzz/$target"
			find "$cache/$mod/$dir/$target" -type f | head -n "$SAVE_MAX" | xargs -r cp -t "$dir/testdata/fuzz/$target"
		fi
	done
done
rm -f /tmp/fuzz.$$.log
echo "fuzz: $ran targets in $((SECONDS - start))s, $failed failed"
[[ $failed == 0 ]]
