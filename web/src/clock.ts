// Times on every page are said one way, whatever the browser's locale: a 24-hour clock
// (13:05:07), and a date as "26 Nov" (with the year where it is not this one). The
// browser's own formats (toLocaleTimeString) would give "1:05:07 PM" in one place and
// "13:05" in another.

const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const two = (n: number) => String(n).padStart(2, "0");

// clock is the local time of day, 24-hour: HH:MM:SS, or HH:MM without seconds.
export function clock(d: Date, seconds = true): string {
  return `${two(d.getHours())}:${two(d.getMinutes())}` + (seconds ? `:${two(d.getSeconds())}` : "");
}

// day is the local date: "26 Nov", or "26 Nov 2025" with the year.
export function day(d: Date, year = false): string {
  return `${d.getDate()} ${months[d.getMonth()]}` + (year ? ` ${d.getFullYear()}` : "");
}

function sameDay(a: Date, b: Date): boolean {
  return a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();
}

// when says when something happened, as of now: its time, after its date where that is
// not today ("25 Nov 23:58:10").
export function when(iso: string, now: Date): string {
  const d = new Date(iso);
  return sameDay(d, now) ? clock(d) : `${day(d, d.getFullYear() !== now.getFullYear())} ${clock(d)}`;
}

// full is the whole date and time, for a title: "26 Nov 2025 13:05:07".
export function full(iso: string): string {
  const d = new Date(iso);
  return `${day(d, true)} ${clock(d)}`;
}

const minute = 60, hour = 60 * minute, dayS = 24 * hour, month = 30 * dayS, year = 365 * dayS;

// The time axis' steps, in seconds: whole seconds at least (a step under one gave labels
// that read the same), each at most twice the one before so that a chart of any width
// gets at least two labels. Steps of 30 days and more are months and years (uPlot places
// those on the first of a month).
export const timeIncrs = [
  1, 2, 3, 5, 10, 15, 20, 30,
  minute, 2 * minute, 3 * minute, 5 * minute, 10 * minute, 15 * minute, 20 * minute, 30 * minute,
  hour, 2 * hour, 3 * hour, 4 * hour, 6 * hour, 8 * hour, 12 * hour,
  dayS, 2 * dayS, 3 * dayS, 4 * dayS, 7 * dayS, 10 * dayS, 14 * dayS, 21 * dayS,
  month, 2 * month, 3 * month, 6 * month, year, 2 * year, 5 * year, 10 * year,
];

// MinSpan is the least time the axis spans, in seconds: right after a start the history
// is one point, or a few less than a second apart; the chart then shows the last minute,
// ending now, with its few points at the right.
export const MinSpan = 60;

// timeRange is the x scale's range: the history's, at least MinSpan and ending at its
// last point. (uPlot would make a single point's range a day, or a thousand days.)
export function timeRange(xs: ArrayLike<number>, min: number | null, max: number | null): [number | null, number | null] {
  if (xs.length === 1) min = max = xs[0];
  if (min === null || max === null) return [min, max];
  return max - min < MinSpan ? [max - MinSpan, max] : [min, max];
}

// timeLabels labels the axis' ticks, incr seconds apart: HH:MM:SS where they are seconds
// apart, HH:MM where minutes or hours, the date where days. Where the axis spans more
// than a day, each time has its date under it; where less, a tick at midnight or the
// first of a new day does. So no two labels read the same.
export function timeLabels(ticks: number[], incr: number, min: number, max: number): string[] {
  const dates = ticks.map((v) => new Date(v * 1000));
  const years = dates.length > 1 && dates[0].getFullYear() !== dates[dates.length - 1].getFullYear();
  if (incr >= dayS) return dates.map((d) => day(d, years));
  const days = max - min > dayS;
  return dates.map((d, i) => {
    const t = clock(d, incr < minute);
    const midnight = d.getHours() === 0 && d.getMinutes() === 0 && d.getSeconds() === 0;
    return days || midnight || (i > 0 && !sameDay(d, dates[i - 1])) ? `${t}\n${day(d, years)}` : t;
  });
}
