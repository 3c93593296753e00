/**
 * The one way this app builds DOM: elements from a tag, properties and
 * children, where every string becomes a text node. Nothing here (or
 * anywhere in the app) assigns innerHTML, so event content — which agents and
 * their users control — can never become markup.
 */

/** What may appear as a child: nodes, text, or nothing. */
export type Child = Node | string | number | null | undefined | false;

/** Attributes and listeners of h(); "class" sets className, "on<event>" adds a listener. */
export type Props = Record<string, string | number | boolean | undefined | ((ev: Event) => void)>;

/** An element with text-only children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") {
      el.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "class") {
      el.className = String(value);
    } else if (name === "value" && (el instanceof HTMLInputElement || el instanceof HTMLSelectElement)) {
      el.value = String(value);
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(el, ...children);
  return el;
}

/** Appends children, strings as text nodes. */
export function append(parent: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(
      typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child,
    );
  }
}

/** Replaces every child of `parent`. */
export function replaceChildren(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, ...children);
}

/** A date as local "YYYY-MM-DD HH:MM:SS". */
export function formatTime(date: Date | undefined): string {
  if (!date) return "";
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

/** A date as local "HH:MM:SS.mmm" (the day is in the session's details). */
export function formatClock(date: Date): string {
  const pad = (n: number, w = 2) => String(n).padStart(w, "0");
  return `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}`;
}
