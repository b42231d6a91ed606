// RelayRoom dashboard: progressive touches only; every page works without it.
// Press "/" to jump to the search box of the page (as on many review tools).
document.addEventListener("keydown", (event) => {
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (target instanceof HTMLElement && target.closest("input, textarea, select, [contenteditable]")) return;
  const search = document.querySelector("input[data-search]");
  if (search instanceof HTMLInputElement) {
    event.preventDefault();
    search.focus();
    search.select();
  }
});

// "All on this page" picks every entry box for the Knowledge tab's bulk form;
// without the script the box stays hidden and each entry is picked by hand.
document.addEventListener("DOMContentLoaded", () => {
  const all = document.querySelector("input[data-pick-all]");
  if (!(all instanceof HTMLInputElement)) return;
  const boxes = () => Array.from(document.querySelectorAll('input.pick[form="bulk-form"]'));
  all.closest("label").hidden = false;
  all.addEventListener("change", () => boxes().forEach((box) => { box.checked = all.checked; }));
  document.addEventListener("change", (event) => {
    if (event.target instanceof HTMLInputElement && event.target.matches('input.pick[form="bulk-form"]')) {
      all.checked = boxes().every((box) => box.checked);
    }
  });
});
