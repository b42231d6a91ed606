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
