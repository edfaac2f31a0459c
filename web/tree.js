/* tree.js — a conversation as a tree of messages, so that an edited question or a regenerated answer
 * keeps the earlier versions as branches the user can switch between. Pure data functions, no DOM.
 *
 * A conversation holds nodes {id: {id, parent, children: [ids], sel, role, content, ...}} and roots
 * (the ids of its first messages) with rootSel; each node's sel picks the child on the active path,
 * so switching a branch back finds the sub-branches as they were left. conv.messages is the active
 * path (the node objects themselves), recomputed by sync(). Loaded before app.js; exposes
 * window.QuarrelTree. */
"use strict";

window.QuarrelTree = (function () {
  let counter = 0;
  const newId = () => "m" + Date.now().toString(36) + (counter++).toString(36) + Math.random().toString(36).slice(2, 6);

  /* The active path: from roots[rootSel] down each node's children[sel]. */
  function path(conv) {
    const out = [];
    let ids = conv.roots, sel = conv.rootSel;
    while (ids && ids.length) {
      const n = conv.nodes[ids[Math.min(Math.max(sel | 0, 0), ids.length - 1)]];
      if (!n) break;
      out.push(n);
      ids = n.children;
      sel = n.sel;
    }
    return out;
  }

  /* Recomputes conv.messages (the active path); returns it. */
  function sync(conv) {
    conv.messages = path(conv);
    return conv.messages;
  }

  /* Adds msg (role, content, ...) as the last child of parentId (null: a new first message), selects it
   * and returns the node. */
  function append(conv, parentId, msg) {
    const node = Object.assign({}, msg, { id: newId(), parent: parentId || null, children: [], sel: 0 });
    conv.nodes[node.id] = node;
    const parent = parentId ? conv.nodes[parentId] : null;
    const list = parent ? parent.children : conv.roots;
    list.push(node.id);
    if (parent) parent.sel = list.length - 1; else conv.rootSel = list.length - 1;
    sync(conv);
    return node;
  }

  /* {ids, index}: the node's siblings (itself included) and its place among them. */
  function siblings(conv, node) {
    const ids = node.parent ? conv.nodes[node.parent].children : conv.roots;
    return { ids, index: ids.indexOf(node.id) };
  }

  /* Makes sibling k of node the active one (clamped); returns the newly active node. */
  function select(conv, node, k) {
    const { ids } = siblings(conv, node);
    const i = Math.max(0, Math.min(ids.length - 1, k));
    if (node.parent) conv.nodes[node.parent].sel = i; else conv.rootSel = i;
    sync(conv);
    return conv.nodes[ids[i]];
  }

  /* A conversation's tree from a plain list of messages (one branch). */
  function fromMessages(conv, messages) {
    conv.nodes = {};
    conv.roots = [];
    conv.rootSel = 0;
    let parent = null;
    for (const m of messages) parent = append(conv, parent, m).id;
    return sync(conv);
  }

  /* Checks a stored conversation's tree (every id known, parents and children agreeing); one without a
   * usable tree is rebuilt from its messages. Returns conv. */
  function normalize(conv) {
    const ok = conv.nodes && typeof conv.nodes === "object" && Array.isArray(conv.roots) &&
      conv.roots.every((id) => conv.nodes[id] && !conv.nodes[id].parent) &&
      Object.values(conv.nodes).every((n) => n && typeof n.content === "string" && Array.isArray(n.children) &&
        n.children.every((c) => conv.nodes[c] && conv.nodes[c].parent === n.id));
    if (!ok) fromMessages(conv, Array.isArray(conv.messages) ? conv.messages : []);
    else sync(conv);
    return conv;
  }

  /* The conversation without its derived path (what is stored). */
  function stored(conv) {
    const c = Object.assign({}, conv);
    delete c.messages;
    return c;
  }

  return Object.freeze({ path, sync, append, siblings, select, fromMessages, normalize, stored });
})();
