import { useState } from "preact/hooks";

export interface SpendChartProps {
  /** Oldest first; amounts in micro-USD, formatted by the server so the browser needs no money code. */
  days: { day: string; micros: number; usd: string }[];
}

const WIDTH = 600;
const HEIGHT = 160;

/**
 * Daily spend as SVG bars. The chart is one image with a summary for its name and one tab stop:
 * hovering or tapping a bar, or the arrow keys once it has the focus, name a day and its amount in
 * the caption (read out as it changes). The days with spend are also listed as text below it.
 */
export default function SpendChart({ days }: SpendChartProps) {
  const [active, setActive] = useState<number | null>(null);
  const max = Math.max(1, ...days.map((d) => d.micros));
  const peak = days.find((d) => d.micros === max);
  const slot = WIDTH / Math.max(1, days.length);
  const total = days.reduce((sum, d) => sum + d.micros, 0);
  const spent = days.filter((d) => d.micros > 0);
  const shown = active === null ? null : days[active];
  const first = days[0]?.day;
  const last = days[days.length - 1]?.day;
  const summary = peak
    ? `Daily spend from ${first} to ${last}: ${spent.length} day${
      spent.length === 1 ? "" : "s"
    } with spend, highest ${peak.usd} USD on ${peak.day}`
    : `Daily spend from ${first} to ${last}: nothing spent`;
  const step = (by: number) =>
    setActive((i) => Math.min(days.length - 1, Math.max(0, (i ?? days.length) + by)));
  return (
    <figure class="chart">
      {peak && (
        // Outside the SVG, so it keeps the page's type size when the chart shrinks on a phone.
        <p class="chart-peak muted">
          Highest day: <strong>${peak.usd}</strong> ({peak.day})
        </p>
      )}
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT + 4}`}
        role="img"
        aria-label={summary}
        tabIndex={0}
        onKeyDown={(event) => {
          if (event.key === "ArrowLeft") step(-1);
          else if (event.key === "ArrowRight") step(1);
          else if (event.key === "Escape") setActive(null);
          else return;
          event.preventDefault();
        }}
        onBlur={() => setActive(null)}
      >
        <line x1="0" x2={WIDTH} y1={HEIGHT} y2={HEIGHT} class="chart-axis" />
        {peak && <line x1="0" x2={WIDTH} y1={8} y2={8} class="chart-axis dashed" />}
        {days.map((d, i) => {
          const h = d.micros === 0 ? 0 : Math.max(2, Math.round((d.micros / max) * (HEIGHT - 8)));
          return (
            <g
              key={d.day}
              onMouseEnter={() => setActive(i)}
              // A tap ends with a mouseleave of its own: only a mouse moving away clears the day.
              onPointerLeave={(event) => {
                if (event.pointerType === "mouse") setActive(null);
              }}
              onClick={() => setActive(i)}
            >
              <rect x={i * slot} y={0} width={slot} height={HEIGHT} class="chart-hit" />
              <rect
                x={i * slot + slot * 0.15}
                y={HEIGHT - h}
                width={slot * 0.7}
                height={h}
                rx="2"
                class={active === i ? "chart-bar active" : "chart-bar"}
              />
            </g>
          );
        })}
      </svg>
      <figcaption class="muted" aria-live="polite">
        {shown
          ? (
            <>
              {shown.day}: <strong>${shown.usd}</strong>
            </>
          )
          : total === 0
          ? "No spend in the last 30 days."
          : (
            <>
              From {first} to {last}{" "}
              (UTC). Hover or tap a bar, or focus the chart and use the arrow keys, for its day.
            </>
          )}
      </figcaption>
      {spent.length > 0 && (
        <details class="chart-days">
          <summary>Days with spend, as text</summary>
          <ul>
            {spent.map((d) => <li key={d.day}>{d.day}: ${d.usd}</li>)}
          </ul>
        </details>
      )}
    </figure>
  );
}
