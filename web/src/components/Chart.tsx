import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { Series, Threshold } from '../api';
import { type ChartData, chartData, summarize } from '../chartdata';
import { formatCompact, formatTime, formatValue } from '../format';
import { loneIndexes } from '../report';
import { useScheme } from '../hooks';

function css(name: string, fallback: string): string {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

/** Upper end of the y axis: the data, and the threshold levels within reach of it (up to
 *  3× the data; with no data above 0, the lower level), so the lines give scale without
 *  flattening the data. Levels beyond are named at the top edge instead. */
export function yMax(dataMax: number, t: Threshold | null | undefined): number {
  let top = Math.max(dataMax, 0);
  if (t && !t.baseline_intervals) {
    const levels = [t.warn, t.crit].filter((v) => Number.isFinite(v) && v > 0).sort((a, b) => a - b);
    if (top <= 0 && levels.length) top = levels[0];
    for (const l of levels) if (l <= top * 3) top = Math.max(top, l);
  }
  return top > 0 ? top * 1.08 : 1;
}

/**
 * Where threshold labels go: each wants its own y (just above its line, or
 * at the top edge for a level off the scale); a label closer than `gap` to
 * the one above it moves down, so "warn 3" and "crit 10" never print over
 * each other ("wcrit10"). Labels pushed past the bottom move the whole stack
 * up. Returns the y of each label, in the order given.
 */
export function placeLabels(wanted: number[], gap: number, top: number, bottom: number): number[] {
  const order = wanted.map((y, i) => ({ y: Math.max(y, top + gap), i })).sort((a, b) => a.y - b.y);
  for (let k = 1; k < order.length; k++) order[k].y = Math.max(order[k].y, order[k - 1].y + gap);
  const over = order.length ? order[order.length - 1].y - bottom : 0;
  if (over > 0) for (const o of order) o.y = Math.max(top + gap, o.y - over);
  const out = new Array<number>(wanted.length);
  for (const o of order) out[o.i] = o.y;
  return out;
}

interface Props {
  series: Series;
  threshold: Threshold | null | undefined;
  title: string;
  height?: number;
  onZoom?: (from: number, to: number) => void;
}

/** The metric over time: line(s), threshold lines, and WARN/CRIT state bands. Drag to zoom. */
export function Chart({ series, threshold, title, height = 240, onZoom }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const scheme = useScheme();
  const data = chartData(series);
  const zoom = useRef(onZoom);
  zoom.current = onZoom;

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const u = new uPlot(options(series, data, series.unit, threshold, el.clientWidth || 600, height, (f, t) => zoom.current?.(f, t)), toAligned(data), el);
    plot.current = u;
    const ro = typeof ResizeObserver === 'function' ? new ResizeObserver(() => u.setSize({ width: el.clientWidth || 600, height })) : null;
    ro?.observe(el);
    return () => {
      ro?.disconnect();
      u.destroy();
      plot.current = null;
    };
    // Rebuilt when the shape changes; new data of the same shape goes through setData below.
  }, [scheme, height, series.unit, series.kind, data.lines.map((l) => l.key).join(), JSON.stringify(threshold)]);

  useEffect(() => {
    const u = plot.current;
    if (!u) return;
    Object.assign(u, { nbs: data, nbsSeries: series });
    u.setData(toAligned(data));
  });

  const s = summarize(data);
  const label =
    data.xs.length === 0
      ? `${title}: no data in this range`
      : `${title} over time: ${data.xs.length} points from ${formatTime(data.xs[0] * 1000)} to ${formatTime(data.xs[data.xs.length - 1] * 1000)}; ` +
        `min ${formatValue(s.min, series.unit)}, max ${formatValue(s.max, series.unit)}, last ${formatValue(s.last, series.unit)}; ` +
        `${s.raised} intervals in WARN or CRIT.`;

  return (
    <figure class="chart" aria-label={label} role="img" data-points={data.xs.length} data-lone={data.lines.reduce((n, l) => n + (l.secondary ? 0 : lonePoints(l.values).length), 0)}>
      <div ref={box} class="chart-canvas" />
      {data.xs.length === 0 && <div class="chart-empty">No data in this range.</div>}
    </figure>
  );
}

const pad2 = (n: number) => String(n).padStart(2, '0');

/**
 * 24-hour tick labels, each tick its own: HH:MM when the ticks are a minute
 * or more apart, HH:MM:SS when closer (a 10-minute window ticked every 30 s
 * would read 06:10, 06:10, 06:11 in minutes), MM-DD over more than three
 * days; the date under the time where it changes over more than a day. A
 * precision that would give two ticks one label is made finer.
 */
export function timeTicks(splits: number[], spanS: number, incrS: number): string[] {
  type Precision = 'day' | 'minute' | 'second';
  const unit: Record<Precision, number> = { day: 86400, minute: 60, second: 1 };
  const local = (v: number) => new Date(v * 1000);
  // Distinct at a precision: no two ticks in the same local day, minute or second.
  const distinct = (p: Precision) => {
    const keys = splits.map((v) => {
      const d = local(v);
      return p === 'day' ? d.toDateString() : p === 'minute' ? `${d.toDateString()} ${d.getHours()}:${d.getMinutes()}` : String(Math.floor(v / unit.second));
    });
    return new Set(keys).size === keys.length;
  };
  let p: Precision = spanS > 3 * 86400 && incrS >= 86400 ? 'day' : incrS >= 60 && spanS > 300 ? 'minute' : 'second';
  if (p === 'day' && !distinct('day')) p = 'minute';
  if (p === 'minute' && !distinct('minute')) p = 'second';
  const parts = splits.map((v) => {
    const d = local(v);
    const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
    return { day: `${pad2(d.getMonth() + 1)}-${pad2(d.getDate())}`, t: p === 'second' ? `${hm}:${pad2(d.getSeconds())}` : hm };
  });
  if (p === 'day') return parts.map((x) => x.day);
  // Over days, the date goes under the time where it changes, or under
  // every time when a time of day comes back (06:00 of two days).
  const everyDay = spanS > 86400 && new Set(parts.map((x) => x.t)).size < parts.length;
  let lastDay = '';
  return parts.map(({ day, t }) => {
    const showDay = spanS > 86400 && (everyDay || day !== lastDay);
    lastDay = day;
    return showDay ? `${t}\n${day}` : t;
  });
}

/** The indexes of a line's points with a value and none beside it: a line cannot draw them, so they get a marker. */
export function lonePoints(ys: readonly (number | null | undefined)[]): number[] {
  return loneIndexes(ys.map((v) => (v === undefined ? null : v)));
}

/** A lone point's marker, in CSS pixels: a dot that reads as data, not a speck. */
export const LONE_POINT_PX = 7;

/** The x axis spans the requested range, not only the stored points. */
function xRange(s: Series, min: number | null, max: number | null): [number, number] {
  const f = Date.parse(s.from) / 1000;
  const t = Date.parse(s.to) / 1000;
  if (Number.isFinite(f) && Number.isFinite(t) && f < t) return [f, t];
  return [min ?? 0, max ?? 1];
}

function toAligned(d: ChartData): uPlot.AlignedData {
  return [d.xs, ...d.lines.map((l) => l.values)] as uPlot.AlignedData;
}

function options(series: Series, d: ChartData, unit: string, t: Threshold | null | undefined, width: number, height: number, onZoom: (from: number, to: number) => void): uPlot.Options {
  const fg = css('--fg-muted', '#667');
  const grid = css('--chart-grid', 'rgba(128,128,128,0.15)');
  const palette = [css('--chart-1', '#2f6fde'), css('--chart-2', '#9a5cd0'), css('--chart-3', '#1a9c8c'), css('--chart-4', '#c2410c')];
  const warn = css('--warn', '#c98a00');
  const crit = css('--crit', '#d0342c');
  const bandWarn = css('--band-warn', 'rgba(230,170,0,0.14)');
  const bandCrit = css('--band-crit', 'rgba(220,50,40,0.16)');
  const font = `11px ${css('--font-sans', 'system-ui, sans-serif')}`;

  const bands = (u: uPlot) => {
    const cd = (u as unknown as { nbs?: ChartData }).nbs ?? d;
    const { ctx } = u;
    const { top, height: h } = u.bbox;
    ctx.save();
    for (let i = 0; i < cd.xs.length; i++) {
      const st = cd.states[i];
      if (st !== 'warn' && st !== 'crit') continue;
      const x0 = u.valToPos(cd.xs[i], 'x', true);
      const x1 = u.valToPos(cd.xs[i] + cd.stepS, 'x', true);
      ctx.fillStyle = st === 'crit' ? bandCrit : bandWarn;
      ctx.fillRect(x0, top, Math.max(1, x1 - x0), h);
    }
    ctx.restore();
  };

  const lines = (u: uPlot) => {
    if (!t || t.baseline_intervals) return;
    const { ctx } = u;
    const { left, width: w } = u.bbox;
    ctx.save();
    ctx.setLineDash([6, 4]);
    ctx.lineWidth = Math.max(1, devicePixelRatio);
    ctx.font = font.replace('11px', `${Math.round(11 * devicePixelRatio)}px`);
    const max = u.scales.y.max ?? 0;
    const min = u.scales.y.min ?? 0;
    const labels: { text: string; color: string; y: number }[] = [];
    for (const [level, color, name] of [
      [t.warn, warn, 'warn'],
      [t.crit, crit, 'crit'],
    ] as const) {
      if (level < min) continue;
      if (level > max) {
        // Off the scale: named at the top edge.
        labels.push({ text: `${name} ${formatCompact(level, unit)} ↑`, color, y: u.bbox.top });
        continue;
      }
      const y = Math.round(u.valToPos(level, 'y', true)) + 0.5;
      ctx.strokeStyle = color;
      ctx.beginPath();
      ctx.moveTo(left, y);
      ctx.lineTo(left + w, y);
      ctx.stroke();
      labels.push({ text: `${name} ${formatCompact(level, unit)}`, color, y: y - 4 * devicePixelRatio });
    }
    const ys = placeLabels(
      labels.map((l) => l.y),
      13 * devicePixelRatio,
      u.bbox.top,
      u.bbox.top + u.bbox.height,
    );
    ctx.textAlign = 'right';
    labels.forEach((l, i) => {
      ctx.fillStyle = l.color;
      ctx.fillText(l.text, left + w - 4 * devicePixelRatio, ys[i]);
    });
    ctx.restore();
  };

  // Where the lone points' markers are, in canvas pixels: kept on the chart for tests and tools that read the page.
  const markLone = (u: uPlot) => {
    const at: string[] = [];
    const cd = (u as unknown as { nbs?: ChartData }).nbs ?? d;
    for (let si = 1; si < u.series.length; si++) {
      if (cd.lines[si - 1]?.secondary) continue;
      for (const i of lonePoints(u.data[si] as (number | null)[])) {
        const x = u.valToPos(u.data[0][i], 'x', true);
        const y = u.valToPos(u.data[si][i] as number, 'y', true);
        if (Number.isFinite(x) && Number.isFinite(y)) at.push(`${Math.round(x)},${Math.round(y)}`);
      }
    }
    u.root.dataset.loneAt = at.join(';');
  };

  return {
    width,
    height,
    series: [
      { value: (_u, v) => (v == null ? '—' : formatTime(v * 1000)) },
      ...d.lines.map((l, i) => ({
        label: l.label,
        stroke: l.key === 'max' ? fg : palette[i % palette.length],
        width: l.secondary ? 1 : 1.75,
        dash: l.secondary ? [3, 3] : undefined,
        spanGaps: false,
        // A point with no neighbour is a marker; the rest are lines only.
        points: {
          show: false,
          size: LONE_POINT_PX,
          width: 1,
          fill: l.key === 'max' ? fg : palette[i % palette.length],
          // The main lines' lone points; a secondary line (max) has its point where the main line's marker is.
          filter: (u: uPlot, si: number) => {
            const idx = l.secondary ? [] : lonePoints(u.data[si] as (number | null)[]);
            return idx.length ? idx : null;
          },
        },
        value: (_u: uPlot, v: number | null) => (v == null ? '—' : formatValue(v, unit)),
      })),
    ],
    scales: {
      x: { time: true, range: (u, min, max) => xRange((u as unknown as { nbsSeries?: Series }).nbsSeries ?? series, min, max) },
      y: {
        range: (_u, min, max) => [Math.min(0, min ?? 0), yMax(max ?? 0, t)],
      },
    },
    axes: [
      {
        stroke: fg,
        grid: { stroke: grid, width: 1 },
        ticks: { stroke: grid, width: 1 },
        font,
        values: (u, splits, _ax, _space, incr) => {
          const labels = timeTicks(splits, (u.scales.x.max ?? 0) - (u.scales.x.min ?? 0), incr);
          // The labels are drawn on the canvas: kept on the chart too, for tests and tools that read the page.
          u.root.dataset.ticks = labels.join('|');
          return labels;
        },
      },
      { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font, size: 56, values: (_u, vals) => vals.map((v) => formatCompact(v, unit)) },
    ],
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false, setScale: false } },
    hooks: {
      drawAxes: [bands],
      draw: [lines, markLone],
      setSelect: [
        (u: uPlot) => {
          if (u.select.width < 4) return;
          const from = u.posToVal(u.select.left, 'x');
          const to = u.posToVal(u.select.left + u.select.width, 'x');
          u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
          if (to > from) onZoom(Math.round(from * 1000), Math.round(to * 1000));
        },
      ],
    },
  };
}
