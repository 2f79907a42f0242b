import { useState } from 'preact/hooks';
import { PRESETS, type TimeRange, describeRange, parseDuration, resolveRange, toLocalInput } from '../timerange';

/** Presets plus a custom absolute range. */
export function TimeRangePicker({ range, onChange }: { range: TimeRange; onChange: (r: TimeRange) => void }) {
  const [custom, setCustom] = useState(false);
  const { from, to } = resolveRange(range);
  const [f, setF] = useState(toLocalInput(from));
  const [t, setT] = useState(toLocalInput(to));
  const [err, setErr] = useState('');
  const value = range.kind === 'relative' ? range.last : 'custom';

  const apply = (e: Event) => {
    e.preventDefault();
    const a = new Date(f).getTime();
    const b = new Date(t).getTime();
    if (Number.isNaN(a) || Number.isNaN(b)) return setErr('Enter both times.');
    if (a >= b) return setErr('From must be before to.');
    setErr('');
    setCustom(false);
    onChange({ kind: 'absolute', from: a, to: b });
  };

  return (
    <div class="range-picker">
      <label class="field-inline">
        <span>Range</span>
        <select
          value={custom ? 'custom' : value}
          onChange={(e) => {
            const v = (e.currentTarget as HTMLSelectElement).value;
            if (v === 'custom') {
              setF(toLocalInput(from));
              setT(toLocalInput(to));
              setCustom(true);
              return;
            }
            setCustom(false);
            onChange({ kind: 'relative', last: v, ms: parseDuration(v)! });
          }}
        >
          {PRESETS.map((p) => (
            <option key={p} value={p}>
              last {p}
            </option>
          ))}
          {range.kind === 'relative' && !(PRESETS as readonly string[]).includes(range.last) && <option value={range.last}>last {range.last}</option>}
          <option value="custom">{range.kind === 'absolute' ? describeRange(range) : 'custom…'}</option>
        </select>
      </label>
      {custom && (
        <form class="range-custom" onSubmit={apply}>
          <label class="field-inline">
            <span>From</span>
            <input type="datetime-local" value={f} onInput={(e) => setF((e.currentTarget as HTMLInputElement).value)} required />
          </label>
          <label class="field-inline">
            <span>To</span>
            <input type="datetime-local" value={t} onInput={(e) => setT((e.currentTarget as HTMLInputElement).value)} required />
          </label>
          <button class="btn btn-sm" type="submit">
            Apply
          </button>
          <button class="btn btn-sm btn-quiet" type="button" onClick={() => setCustom(false)}>
            Cancel
          </button>
          {err && (
            <span class="field-error" role="alert">
              {err}
            </span>
          )}
        </form>
      )}
    </div>
  );
}
