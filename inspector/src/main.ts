/**
 * The memory inspector: a page that shows which sessions exist and what
 * their agents saw and did, live. Routes live in the URL fragment so the
 * server only ever serves index.html and its assets.
 */
import "./style.css";
import { apiKey, setApiKey } from "./api";
import { routeOf } from "./routes";

const app = document.getElementById("app")!;
const keyForm = document.getElementById("api-key-form") as HTMLFormElement;
const keyInput = document.getElementById("api-key") as HTMLInputElement;

keyInput.value = apiKey();
keyForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  setApiKey(keyInput.value.trim());
  render(); // re-read everything with the new key
});

let stop: (() => void) | undefined;

function render(): void {
  stop?.();
  const { view, nav } = routeOf(location.hash);
  for (const link of document.querySelectorAll<HTMLAnchorElement>("[data-nav]")) {
    link.classList.toggle("active", link.dataset.nav === nav);
  }
  stop = view(app);
}

window.addEventListener("hashchange", render);
render();
