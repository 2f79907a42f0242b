#!/bin/sh
# pg-stat-statements-bindir.sh DIR [PGBIN]: makes DIR a PostgreSQL bin
# directory whose pg_ctl starts every server with pg_stat_statements loaded
# (shared_preload_libraries; track = all, so a trigger's statements are
# timed too), for internal/pgcluster's NBS_PG_BINDIR. The benchmarks that
# read it (bench/fleet IngestVsCopy) then time each statement of the write
# path and the fold; without it they sample pg_stat_activity only.
#
#   tools/pg-stat-statements-bindir.sh /tmp/pgbin
#   NBS_PG_BINDIR=/tmp/pgbin NBS_REQUIRE_PG=1 go test -v -run '^$' -bench IngestVsCopy -benchtime 1x ./bench/fleet/
set -eu
dir=${1:?usage: $0 DIR [PGBIN]}
pgbin=${2:-/usr/lib/postgresql/15/bin}
[ -x "$pgbin/pg_ctl" ] || { echo "$0: no pg_ctl in $pgbin" >&2; exit 1; }
mkdir -p "$dir"
for f in "$pgbin"/*; do
	ln -sf "$f" "$dir/"
done
rm -f "$dir/pg_ctl"
cat > "$dir/pg_ctl" <<WRAP
#!/bin/sh
if [ "\${1:-}" = start ]; then
	shift
	exec "$pgbin/pg_ctl" start -o "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all" "\$@"
fi
exec "$pgbin/pg_ctl" "\$@"
WRAP
chmod +x "$dir/pg_ctl"
