import { normState } from '../state';

/** A tiny trend line; gaps (null) break the line. */
export function Sparkline({ values, state, label, width = 76, height = 22 }: { values: (number | null)[] | undefined; state: string; label: string; width?: number; height?: number }) {
  if (!values) return <span class="spark spark-empty" style={{ width: `${width}px`, height: `${height}px` }} aria-hidden="true" />;
  const nums = values.filter((v): v is number => v !== null && Number.isFinite(v));
  if (nums.length === 0) {
    return (
      <span class="spark spark-empty" style={{ width: `${width}px`, height: `${height}px` }} role="img" aria-label={`${label}: no data in range`}>
        no data
      </span>
    );
  }
  const min = Math.min(0, ...nums);
  const max = Math.max(...nums);
  const span = max - min || 1;
  const n = values.length;
  const x = (i: number) => (n <= 1 ? width / 2 : (i / (n - 1)) * (width - 2) + 1);
  const y = (v: number) => height - 2 - ((v - min) / span) * (height - 4);
  // Runs of consecutive values become lines; a lone value (its neighbours missing) a dot.
  const segs: string[] = [];
  const dots: [number, number][] = [];
  let run: [number, number][] = [];
  const flush = () => {
    if (run.length === 1) dots.push(run[0]);
    else if (run.length > 1) segs.push(run.map(([px, py], i) => `${i ? 'L' : 'M'}${px.toFixed(1)},${py.toFixed(1)}`).join(''));
    run = [];
  };
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) flush();
    else run.push([x(i), y(v)]);
  });
  flush();
  const last = nums[nums.length - 1];
  return (
    <svg class={`spark st-${normState(state)}`} width={width} height={height} viewBox={`0 0 ${width} ${height}`} role="img" aria-label={`${label}: trend, max ${max.toPrecision(3)}, last ${last.toPrecision(3)}`}>
      {segs.length > 0 && <path d={segs.join('')} fill="none" stroke="currentColor" stroke-width="1.5" stroke-linejoin="round" vector-effect="non-scaling-stroke" />}
      {dots.map(([cx, cy], i) => (
        <circle key={i} cx={cx} cy={cy} r="1.8" fill="currentColor" />
      ))}
    </svg>
  );
}
