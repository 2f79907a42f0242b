import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { type Aligned, fmtUtc, loneIndexes } from '../report';
import { useScheme } from '../hooks';

function css(name: string, fallback: string): string {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

/** The width a chart takes on an A4 page (print stylesheet: 180 mm of content at 96 dpi). */
export const PRINT_WIDTH = 680;

interface Props {
  data: Aligned;
  labels: string[];
  /** Formats an axis or legend value. */
  fmt: (v: number) => string;
  title: string;
  /** The period, so the x axis spans it even where there is no data. */
  from: number;
  to: number;
  height?: number;
  /**
   * A level drawn across the chart, dashed: the period's median, so a
   * chart of a few raised spells still shows where the line usually is.
   */
  baseline?: { label: string; value: number | null | undefined };
}

const dash = [6, 4];

/**
 * A report's chart: lines over the period, broken where there is no data
 * (spanGaps off and nulls kept), points with nothing on either side drawn
 * as dots, an optional dashed baseline, and a legend of its own (not
 * uPlot's live one) that prints. Sized for A4 while printing.
 */
export function ReportChart({ data, labels, fmt, title, from, to, height = 200, baseline }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const scheme = useScheme();
  const base = baseline && typeof baseline.value === 'number' && Number.isFinite(baseline.value) && data.xs.length > 0 ? baseline : null;
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const fg = css('--fg-muted', '#667');
    const grid = css('--chart-grid', 'rgba(128,128,128,0.15)');
    const palette = [css('--chart-1', '#2f6fde'), css('--chart-2', '#9a5cd0'), css('--chart-3', '#1a9c8c'), css('--chart-4', '#c2410c')];
    const font = `11px ${css('--font-sans', 'system-ui, sans-serif')}`;
    const lone = data.ys.map(loneIndexes);
    const series: uPlot.Series[] = [
      { value: (_u, v) => (v == null ? '—' : fmtUtc(v * 1000)) },
      ...labels.map((label, i) => ({
        label,
        stroke: palette[i % palette.length],
        fill: undefined,
        width: i === 0 ? 1.75 : 1.25,
        spanGaps: false,
        // Lines join neighbours; a point alone is a dot or nothing at all.
        points: { show: false, size: 6, fill: palette[i % palette.length], filter: () => (lone[i].length ? lone[i] : null) },
        value: (_u: uPlot, v: number | null) => (v == null ? '—' : fmt(v)),
      })),
    ];
    const ys: (number | null)[][] = [...data.ys];
    if (base) {
      series.push({ label: base.label, stroke: fg, width: 1, dash, points: { show: false }, value: (_u: uPlot, v: number | null) => (v == null ? '—' : fmt(v)) });
      ys.push(data.xs.map(() => base.value as number));
    }
    const opts: uPlot.Options = {
      width: el.clientWidth || PRINT_WIDTH,
      height,
      series,
      scales: { x: { time: true, range: () => [from / 1000, to / 1000] }, y: { range: (_u, _min, max) => [0, max && max > 0 ? max * 1.08 : 1] } },
      axes: [
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font },
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font, size: 64, values: (_u, vals) => vals.map((v) => fmt(v)) },
      ],
      legend: { show: false },
      // The page states its times in UTC; so does the axis, whatever the browser's zone.
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
      cursor: { drag: { x: false, y: false } },
    };
    const u = new uPlot(opts, [data.xs, ...ys] as uPlot.AlignedData, el);
    const fit = () => u.setSize({ width: el.clientWidth || PRINT_WIDTH, height });
    const ro = typeof ResizeObserver === 'function' ? new ResizeObserver(fit) : null;
    ro?.observe(el);
    // Printing lays the page out at A4 width; the canvas is drawn before that,
    // so redraw it at the printed width and back afterwards.
    const before = () => u.setSize({ width: PRINT_WIDTH, height });
    window.addEventListener('beforeprint', before);
    window.addEventListener('afterprint', fit);
    return () => {
      ro?.disconnect();
      window.removeEventListener('beforeprint', before);
      window.removeEventListener('afterprint', fit);
      u.destroy();
    };
  }, [scheme, height, from, to, labels.join('\u0000'), data, base?.label, base?.value]);

  const points = data.xs.length;
  const label =
    points === 0
      ? `${title}: no data in this period`
      : `${title}: ${labels.join(' and ')} at ${points} points from ${fmtUtc(from)} to ${fmtUtc(to)}; gaps are periods without data${base ? `; ${base.label} ${fmt(base.value as number)}` : ''}.`;
  return (
    <figure class="chart report-chart">
      <div ref={box} class="chart-canvas" role="img" aria-label={label} />
      {points === 0 && <div class="chart-empty">No data in this period.</div>}
      <ul class="chart-legend" aria-hidden="true">
        {labels.map((l, i) => (
          <li key={l}>
            <span class={`chart-key chart-key-${(i % 4) + 1}`} />
            {l}
          </li>
        ))}
        {base && (
          <li>
            <span class="chart-key chart-key-base" />
            {base.label}: {fmt(base.value as number)}
          </li>
        )}
      </ul>
      <figcaption class="sr-only">{label}</figcaption>
    </figure>
  );
}
