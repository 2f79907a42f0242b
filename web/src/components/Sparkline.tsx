import { normState } from '../state';

/** A tiny trend line; gaps (null) break the line. */
export function Sparkline({ values, state, label, width = 96, height = 22 }: { values: (number | null)[] | undefined; state: string; label: string; width?: number; height?: number }) {
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
  const segs: string[] = [];
  let cur = '';
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) {
      if (cur) segs.push(cur);
      cur = '';
      return;
    }
    cur += `${cur ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
  });
  if (cur) segs.push(cur);
  const last = nums[nums.length - 1];
  return (
    <svg class={`spark st-${normState(state)}`} width={width} height={height} viewBox={`0 0 ${width} ${height}`} role="img" aria-label={`${label}: trend, max ${max.toPrecision(3)}, last ${last.toPrecision(3)}`}>
      <path d={segs.join('')} fill="none" stroke="currentColor" stroke-width="1.5" stroke-linejoin="round" vector-effect="non-scaling-stroke" />
    </svg>
  );
}
