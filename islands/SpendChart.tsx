import { useState } from "preact/hooks";

export interface SpendChartProps {
  /** Oldest first; amounts in micro-USD, formatted by the server so the browser needs no money code. */
  days: { day: string; micros: number; usd: string }[];
}

const WIDTH = 600;
const HEIGHT = 160;

/** Daily spend as SVG bars; hovering or focusing a bar names its day and amount. */
export default function SpendChart({ days }: SpendChartProps) {
  const [active, setActive] = useState<number | null>(null);
  const max = Math.max(1, ...days.map((d) => d.micros));
  const peak = days.find((d) => d.micros === max);
  const slot = WIDTH / Math.max(1, days.length);
  const total = days.reduce((sum, d) => sum + d.micros, 0);
  const shown = active === null ? null : days[active];
  return (
    <figure class="chart">
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT + 4}`}
        role="img"
        aria-label={`Daily spend over the last ${days.length} days`}
      >
        <line x1="0" x2={WIDTH} y1={HEIGHT} y2={HEIGHT} class="chart-axis" />
        {peak && <line x1="0" x2={WIDTH} y1={8} y2={8} class="chart-axis dashed" />}
        {peak && <text x="2" y="20" class="chart-label">{`$${peak.usd}`}</text>}
        {days.map((d, i) => {
          const h = d.micros === 0 ? 0 : Math.max(2, Math.round((d.micros / max) * (HEIGHT - 8)));
          return (
            <g
              key={d.day}
              tabIndex={0}
              onMouseEnter={() => setActive(i)}
              onFocus={() => setActive(i)}
              onMouseLeave={() => setActive(null)}
              onBlur={() => setActive(null)}
            >
              <title>{`${d.day}: $${d.usd}`}</title>
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
      <figcaption class="muted">
        {shown
          ? (
            <>
              {shown.day}: <strong>${shown.usd}</strong>
            </>
          )
          : total === 0
          ? "No spend in the last 30 days."
          : <>From {days[0]?.day} to {days[days.length - 1]?.day} (UTC). Hover a bar for its day.
          </>}
      </figcaption>
    </figure>
  );
}
