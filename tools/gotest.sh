#!/usr/bin/env bash
# The test run of make test, in two phases (docs/development.md, "Where
# the time goes"):
#
#  1. timing: the tests tools/timing-tests.txt lists (they compare
#     microsecond timings with kernel oracles, or bound a latency, a rate
#     or a timeout) run one package at a time: first its two light lanes
#     (lines marked lane:a and lane:b) side by side, then the rest with
#     nothing else running;
#  2. concurrent: every other Go test, packages two at a time and e2e's
#     tests side by side (t.Parallel, -parallel GOTEST_PARALLEL), beside
#     go vet, the web unit tests, the fuzz targets and the tools' own
#     modules (these at nice 5: they only compute, and the tests beside
#     them wait on conditions with deadlines of seconds).
#
# A package or test not listed in tools/timing-tests.txt is in phase 2.
# Every go test -json stream is kept in test-artifacts/ and joined into
# test-artifacts/go-test.json; testtime prints go test's usual lines and,
# at the end, the slowest packages and tests of both phases. The exit
# status is 1 when anything failed in either phase.
#
#   GO=go TESTTIME=bin/testtime tools/gotest.sh
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
TESTTIME=${TESTTIME:-bin/testtime}
PARALLEL=${GOTEST_PARALLEL:-4}
FUZZTIME=${FUZZTIME:-2s}
art=test-artifacts
mkdir -p "$art"
rm -f "$art"/go-test*.json "$art"/phase[12]-*.log "$art"/phase[12]-*.rc
failed=0

# Read the list: whole packages, and packages split by test name, each in
# its lane ("" = alone, after the lanes a and b have run side by side).
whole=()
declare -A wholelane=() split=() names=() # split: package -> ^(TestA|TestB)$ of all its lines
declare -A lanesplit=()                                # "lane package" -> ^(TestA|TestB)$
while read -ra words; do
	ln=""
	if [[ ${words[0]:-} == lane:* ]]; then
		ln=${words[0]#lane:}
		[[ $ln == a || $ln == b ]] || { echo "gotest: tools/timing-tests.txt: unknown lane ${words[0]} (lane:a or lane:b)" >&2; exit 1; }
		words=("${words[@]:1}")
	fi
	pkg=${words[0]:-} tests=("${words[@]:1}")
	[[ -z $pkg || $pkg == \#* ]] && continue
	if ((${#tests[@]} == 0)); then
		whole+=("$pkg")
		wholelane[$pkg]=$ln
	else
		names[$pkg]="${names[$pkg]:+${names[$pkg]} }${tests[*]}"
		lanesplit["$ln $pkg"]="^($(IFS='|'; echo "${tests[*]}"))\$"
		split[$pkg]="^($(echo "${names[$pkg]}" | tr ' ' '|'))\$"
	fi
done < tools/timing-tests.txt

# go list failing must stop the run, not leave packages out of it.
list() { $GO list "$@" || { echo "gotest: go list $*: failed" >&2; exit 1; }; }
all_out=$(list ./...) || exit 1
timed_out=$(list "${whole[@]}") || exit 1
mapfile -t all <<<"$all_out"
mapfile -t timed <<<"$timed_out"
declare -A skip=() full=()
for p in "${timed[@]}"; do skip[$p]=1; done
splitpkgs=()
for p in "${!split[@]}"; do
	full[$p]=$($GO list "$p") || { echo "gotest: tools/timing-tests.txt names $p, which go list does not know" >&2; exit 1; }
	skip[${full[$p]}]=1
	splitpkgs+=("$p")
done
mapfile -t splitpkgs < <(printf '%s\n' "${splitpkgs[@]}" | sort)
# The browser test takes minutes: a lane of its own, so it starts with
# phase 2 instead of after the 50-odd packages before it in go list's order.
own=(./web/e2e)
for p in "${own[@]}"; do skip[$(list "$p")]=1 || exit 1; done
rest=()
for p in "${all[@]}"; do [[ -n ${skip[$p]:-} ]] || rest+=("$p"); done

# runlane LANE: the lane's whole packages (-p 1), then its split packages'
# listed tests, one package at a time.
runlane() {
	local ln=$1 rc=0 pkgs=() p
	for p in "${whole[@]}"; do [[ ${wholelane[$p]} == "$ln" ]] && pkgs+=("$p"); done
	if ((${#pkgs[@]} > 0)); then
		$GO test -count=1 -p 1 -timeout 25m -json "${pkgs[@]}" 2>&1 || rc=1
	fi
	for p in "${splitpkgs[@]}"; do
		[[ -n ${lanesplit["$ln $p"]:-} ]] || continue
		$GO test -count=1 -p 1 -timeout 25m -json -run "${lanesplit["$ln $p"]}" "$p" 2>&1 || rc=1
	done
	return $rc
}

phase_start=$SECONDS
echo "--- phase 1: timing tests (${#whole[@]} packages, and ${#splitpkgs[@]} packages' listed tests): lanes a and b side by side, then the rest one package at a time"
for ln in a b; do
	(runlane "$ln" >"$art/phase1-$ln.log"; echo $? >"$art/phase1-$ln.rc") &
done
wait
for ln in a b; do
	[[ $(cat "$art/phase1-$ln.rc" 2>/dev/null) == 0 ]] || failed=1
	$TESTTIME -top 0 -save "$art/go-test-timing-$ln.json" <"$art/phase1-$ln.log" || failed=1
done
echo "--- phase 1, lanes a and b: $((SECONDS - phase_start)) s"
runlane "" | $TESTTIME -top 0 -save "$art/go-test-timing-alone.json" || failed=1
cat "$art"/go-test-timing-{a,b,alone}.json >"$art/go-test-timing.json"
t1=$((SECONDS - phase_start))
# A listed test that did not run (renamed, deleted) would run in phase 2
# beside the others without anyone noticing: the list must be fixed.
for p in "${splitpkgs[@]}"; do
	for name in ${names[$p]}; do
		if ! grep -qE "\"Action\":\"(pass|fail|skip)\",\"Package\":\"${full[$p]}\",\"Test\":\"$name\"" "$art/go-test-timing.json"; then
			echo "--- tools/timing-tests.txt names $p $name, which did not run: fix the list"
			failed=1
		fi
	done
done
echo "--- phase 1: ${t1} s"

# Phase 2: each lane writes its stream to a file; they are printed in
# order once all have ended, so the output stays readable.
phase_start=$SECONDS
lanes=()
lane() { # lane NAME COMMAND...: run COMMAND in the background into NAME's log
	local name=$1
	shift
	lanes+=("$name")
	("$@" >"$art/phase2-$name.log" 2>&1; echo $? >"$art/phase2-$name.rc") &
}
echo "--- phase 2: ${own[*]}, ${#rest[@]} packages (-p 2), the rest of ${splitpkgs[*]} (-parallel $PARALLEL), go vet, web unit tests, fuzz targets (${FUZZTIME} each), tools modules"
for p in "${own[@]}"; do
	lane "go-${p//[.\/]/_}" $GO test -count=1 -timeout 25m -json "$p"
done
lane go-rest $GO test -count=1 -p 2 -timeout 25m -json "${rest[@]}"
for p in "${splitpkgs[@]}"; do
	lane "go-${p//[.\/]/_}" $GO test -count=1 -timeout 25m -parallel "$PARALLEL" -json -skip "${split[$p]}" "$p"
done
lane vet nice -n 5 $GO vet ./...
lane web-unit nice -n 5 bash -c 'cd web && npm test'
lane fuzz nice -n 5 env GO="$GO" FUZZTIME="$FUZZTIME" tools/fuzz.sh
lane tools-modules nice -n 5 bash -c "cd tools/manifests && $GO test -count=1 ./... && cd ../testtime && $GO test -count=1 ./..."
wait
t2=$((SECONDS - phase_start))

for name in "${lanes[@]}"; do
	rc=$(cat "$art/phase2-$name.rc" 2>/dev/null || echo 1)
	if [[ $name == go-* ]]; then
		# go test -json through testtime: the usual ok/FAIL lines.
		$TESTTIME -top 0 -save "$art/go-test-$name.json" <"$art/phase2-$name.log" || rc=1
	else
		echo "--- $name"
		cat "$art/phase2-$name.log"
	fi
	if [[ $rc != 0 ]]; then
		echo "--- $name FAILED (exit $rc)"
		failed=1
	fi
done
echo "--- phase 2: ${t2} s"

cat "$art/go-test-timing.json" "$art"/go-test-go-*.json >"$art/go-test.json"
$TESTTIME -quiet -top 20 <"$art/go-test.json" || failed=1
echo "--- phase 1 (timing, alone) ${t1} s, phase 2 (concurrent) ${t2} s"
exit $failed
