import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { type Aligned, fmtUtc } from '../report';
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
}

/**
 * A report's chart: lines over the period, broken where there is no data
 * (spanGaps off and nulls kept), sized for A4 while printing.
 */
export function ReportChart({ data, labels, fmt, title, from, to, height = 200 }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const scheme = useScheme();
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const fg = css('--fg-muted', '#667');
    const grid = css('--chart-grid', 'rgba(128,128,128,0.15)');
    const palette = [css('--chart-1', '#2f6fde'), css('--chart-2', '#9a5cd0'), css('--chart-3', '#1a9c8c'), css('--chart-4', '#c2410c')];
    const font = `11px ${css('--font-sans', 'system-ui, sans-serif')}`;
    const opts: uPlot.Options = {
      width: el.clientWidth || PRINT_WIDTH,
      height,
      series: [
        { value: (_u, v) => (v == null ? '—' : fmtUtc(v * 1000)) },
        ...labels.map((label, i) => ({
          label,
          stroke: palette[i % palette.length],
          width: i === 0 ? 1.75 : 1.25,
          spanGaps: false,
          value: (_u: uPlot, v: number | null) => (v == null ? '—' : fmt(v)),
        })),
      ],
      scales: { x: { time: true, range: () => [from / 1000, to / 1000] }, y: { range: (_u, _min, max) => [0, max && max > 0 ? max * 1.08 : 1] } },
      axes: [
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font },
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 }, font, size: 64, values: (_u, vals) => vals.map((v) => fmt(v)) },
      ],
      legend: { show: true, live: true },
      // The page states its times in UTC; so does the axis, whatever the browser's zone.
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
      cursor: { drag: { x: false, y: false } },
    };
    const u = new uPlot(opts, [data.xs, ...data.ys] as uPlot.AlignedData, el);
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
  }, [scheme, height, from, to, labels.join('\u0000'), data]);

  const points = data.xs.length;
  const label = points === 0 ? `${title}: no data in this period` : `${title}: ${points} points from ${fmtUtc(from)} to ${fmtUtc(to)}; gaps are periods without data.`;
  return (
    <figure class="chart report-chart" role="img" aria-label={label}>
      <div ref={box} class="chart-canvas" />
      {points === 0 && <div class="chart-empty">No data in this period.</div>}
      <figcaption class="sr-only">{label}</figcaption>
    </figure>
  );
}
