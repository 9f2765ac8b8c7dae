/*
 * The market page, live from the WebSocket streams (apps/streams): the order book with depth bars,
 * the spread and the user's own orders marked, a depth chart, recent trades, the candlestick chart
 * with volume and an interval switch, the 24-hour strip; for a logged-in user their balances, their open
 * orders, order history and fills (refreshed on each of their execution reports) and a toast when one of
 * their orders fills, partly or fully. No polling: one combined stream connection.
 *
 * The book follows Binance's procedure (apps/streams/book.py): buffer the depth stream, fetch the
 * REST depth, drop events up to its last_update_id, apply the rest; a gap, or a dropped connection,
 * starts again from a fresh snapshot. Charts: TradingView Lightweight Charts (static/vendor).
 * Configuration comes from the data attributes of #market-live (no inline script: CSP).
 */
(function () {
  "use strict";

  const root = document.getElementById("market-live");
  if (!root) return;
  const config = {
    symbol: root.dataset.symbol,
    stream: root.dataset.streamSymbol,
    streamsUrl: root.dataset.streamsUrl || (location.protocol === "https:" ? "wss://" : "ws://") + location.host,
    quoteDecimals: Number(root.dataset.quoteDecimals),
    baseDecimals: Number(root.dataset.baseDecimals),
    pricePlaces: Number(root.dataset.pricePlaces),
    baseShown: Number(root.dataset.baseShown),
    authenticated: root.dataset.authenticated === "true",
    bookLevels: Number(root.dataset.bookLevels || 12),
    interval: root.dataset.interval || "1m",
  };
  const api = (path) => "/api/v1/" + path;
  // What the page asks by itself (on connecting, on a stream's event) is no use of the session: the server's idle
  // timeout (apps/accounts/session_idle.py) does not count a request with this header.
  const background = { "X-Background-Request": "1" };
  const csrfToken = () => (document.querySelector("input[name=csrfmiddlewaretoken]") || {}).value || "";

  // Amounts stay strings (exact decimals from the server); numbers only for drawing and sorting.
  const num = (text) => Number(text);

  // ---------------------------------------------------------------------------------- the book
  const book = { bids: new Map(), asks: new Map(), lastUpdateId: null, buffer: [] };
  const ownOrders = new Map(); // order id -> {side, price (string)}
  let snapshotPending = false;

  function resetBook() {
    book.bids.clear();
    book.asks.clear();
    book.lastUpdateId = null;
    book.buffer = [];
  }

  async function takeSnapshot() {
    if (snapshotPending) return;
    snapshotPending = true;
    try {
      const response = await fetch(api(`markets/${config.symbol}/depth/?limit=1000`), { credentials: "same-origin", headers: background });
      const depth = await response.json();
      if (book.buffer.length && book.buffer[0].U > depth.last_update_id + 1) {
        setTimeout(takeSnapshot, 200); // the stream is ahead of this snapshot: fetch a newer one
        return;
      }
      book.bids = new Map(depth.bids.map(([price, qty]) => [price, qty]));
      book.asks = new Map(depth.asks.map(([price, qty]) => [price, qty]));
      book.lastUpdateId = depth.last_update_id;
      const buffered = book.buffer;
      book.buffer = [];
      buffered.forEach(applyDepth);
      drawBook();
    } finally {
      snapshotPending = false;
    }
  }

  function onDepth(event) {
    if (book.lastUpdateId === null) {
      book.buffer.push(event);
      takeSnapshot();
    } else {
      applyDepth(event);
      scheduleDraw();
    }
  }

  function applyDepth(event) {
    if (event.u <= book.lastUpdateId) return;
    if (!(event.U <= book.lastUpdateId + 1 && book.lastUpdateId + 1 <= event.u)) {
      resetBook(); // a gap: start again from a fresh snapshot
      book.buffer.push(event);
      takeSnapshot();
      return;
    }
    for (const [side, levels] of [[book.bids, event.b], [book.asks, event.a]]) {
      for (const [price, qty] of levels) {
        if (num(qty) === 0) side.delete(price);
        else side.set(price, qty);
      }
    }
    book.lastUpdateId = event.u;
  }

  let drawQueued = false;
  function scheduleDraw() {
    if (drawQueued) return;
    drawQueued = true;
    requestAnimationFrame(() => {
      drawQueued = false;
      drawBook();
    });
  }

  function sortedLevels() {
    const bids = [...book.bids.entries()].sort((a, b) => num(b[0]) - num(a[0]));
    const asks = [...book.asks.entries()].sort((a, b) => num(a[0]) - num(b[0]));
    return { bids, asks };
  }

  function ownPrices(side) {
    const prices = new Set();
    for (const order of ownOrders.values()) if (order.side === side) prices.add(num(order.price));
    return prices;
  }

  // Amounts as the server shows them (apps.web.templatetags.money): cut to the places, never rounded up,
  // thousands grouped; prices keep their tick's places, other amounts drop trailing zeros.
  function cut(text, places, trim) {
    let value = String(text);
    const negative = value.startsWith("-");
    if (negative) value = value.slice(1);
    let [whole, fraction = ""] = value.split(".");
    fraction = fraction.slice(0, places).padEnd(places, "0");
    if (trim) fraction = fraction.replace(/0+$/, "");
    whole = whole.replace(/^0+(?=\d)/, "").replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return (negative ? "-" : "") + whole + (fraction ? "." + fraction : "");
  }
  const priceText = (text) => cut(text, config.pricePlaces, false);
  const shownText = (text, places) => cut(text, places, true);

  function bookRow(kind, price, qty, cumulative, total, own) {
    const row = document.createElement("tr");
    row.className = kind + (own ? " own" : "");
    row.dataset.price = price;
    row.style.setProperty("--depth", total ? `${((100 * cumulative) / total).toFixed(2)}%` : "0%");
    const priceCell = document.createElement("td");
    priceCell.className = "num " + (kind === "bid" ? "buy" : "sell");
    priceCell.textContent = priceText(price);
    if (own) priceCell.title = "Your order rests at this price";
    const qtyCell = document.createElement("td");
    qtyCell.className = "num";
    qtyCell.textContent = shownText(qty, config.baseShown);
    row.append(priceCell, qtyCell);
    return row;
  }

  function drawBook() {
    const body = document.querySelector("#book tbody");
    if (!body || book.lastUpdateId === null) return;
    const { bids, asks } = sortedLevels();
    const shownBids = bids.slice(0, config.bookLevels);
    const shownAsks = asks.slice(0, config.bookLevels);
    const cumulate = (levels) => {
      let sum = 0;
      return levels.map(([price, qty]) => [price, qty, (sum += num(qty))]);
    };
    const bidRows = cumulate(shownBids);
    const askRows = cumulate(shownAsks);
    const total = Math.max(bidRows.length ? bidRows[bidRows.length - 1][2] : 0, askRows.length ? askRows[askRows.length - 1][2] : 0);
    const ownBids = ownPrices("buy");
    const ownAsks = ownPrices("sell");
    const rows = [];
    for (const [price, qty, cumulative] of askRows.reverse()) rows.push(bookRow("ask", price, qty, cumulative, total, ownAsks.has(num(price))));
    const spread = document.createElement("tr");
    spread.className = "spread";
    const spreadCell = document.createElement("td");
    spreadCell.colSpan = 2;
    if (shownBids.length && shownAsks.length) {
      const value = num(shownAsks[0][0]) - num(shownBids[0][0]);
      const mid = (num(shownAsks[0][0]) + num(shownBids[0][0])) / 2;
      spreadCell.textContent = `Spread ${value.toFixed(config.quoteDecimals)} (${((100 * value) / mid).toFixed(3)}%)`;
    } else {
      spreadCell.textContent = "No spread: one side is empty";
    }
    spread.append(spreadCell);
    rows.push(spread);
    for (const [price, qty, cumulative] of bidRows) rows.push(bookRow("bid", price, qty, cumulative, total, ownBids.has(num(price))));
    if (!askRows.length && !bidRows.length) {
      spreadCell.textContent = "The book is empty.";
    }
    body.replaceChildren(...rows);
    root.dataset.bookUpdateId = String(book.lastUpdateId);
    drawDepthChart(bids, asks);
  }

  // ------------------------------------------------------------------------------- the charts
  const charts = window.LightweightCharts;
  let priceChart = null, candles = null, volumes = null, depthChart = null, depthBids = null, depthAsks = null;
  let lastCandleTime = 0; // the newest bar's open time (s): the chart updates only its newest bar, or adds one after it
  const style = getComputedStyle(document.documentElement);
  const buyColour = style.getPropertyValue("--buy").trim() || "#16a34a";
  const sellColour = style.getPropertyValue("--sell").trim() || "#dc2626";

  function setUpCharts() {
    const priceElement = document.getElementById("price-chart");
    const depthElement = document.getElementById("depth-chart");
    if (!charts || !priceElement || !depthElement) return;
    const priceFormat = { type: "price", precision: config.quoteDecimals, minMove: 10 ** -config.quoteDecimals };
    priceChart = charts.createChart(priceElement, {
      autoSize: true,
      layout: { attributionLogo: true },
      timeScale: { timeVisible: true, secondsVisible: false },
    });
    candles = priceChart.addSeries(charts.CandlestickSeries, {
      upColor: buyColour, downColor: sellColour, wickUpColor: buyColour, wickDownColor: sellColour, borderVisible: false, priceFormat,
    });
    volumes = priceChart.addSeries(charts.HistogramSeries, { priceScaleId: "volume", priceFormat: { type: "volume" } });
    priceChart.priceScale("volume").applyOptions({ scaleMargins: { top: 0.8, bottom: 0 } });
    candles.priceScale().applyOptions({ scaleMargins: { top: 0.05, bottom: 0.25 } });
    depthChart = charts.createOptionsChart(depthElement, { autoSize: true, layout: { attributionLogo: true } });
    depthBids = depthChart.addSeries(charts.AreaSeries, { lineColor: buyColour, topColor: buyColour + "66", bottomColor: buyColour + "11" });
    depthAsks = depthChart.addSeries(charts.AreaSeries, { lineColor: sellColour, topColor: sellColour + "66", bottomColor: sellColour + "11" });
  }

  const toSeconds = (iso) => Math.floor(Date.parse(iso) / 1000);
  const volumeColour = (open, close) => (num(close) >= num(open) ? buyColour + "88" : sellColour + "88");

  async function loadCandles(interval) {
    if (!candles) return;
    const response = await fetch(api(`markets/${config.symbol}/candles/?interval=${interval}&limit=500`), { credentials: "same-origin" });
    if (!response.ok) return;
    const rows = await response.json();
    const list = (Array.isArray(rows) ? rows : rows.results).slice().sort((a, b) => toSeconds(a.open_time) - toSeconds(b.open_time));
    candles.setData(list.map((c) => ({ time: toSeconds(c.open_time), open: num(c.open), high: num(c.high), low: num(c.low), close: num(c.close) })));
    volumes.setData(list.map((c) => ({ time: toSeconds(c.open_time), value: num(c.volume), color: volumeColour(c.open, c.close) })));
    priceChart.timeScale().fitContent();
    lastCandleTime = list.length ? toSeconds(list[list.length - 1].open_time) : 0;
    root.dataset.candles = String(list.length);
  }

  function onKline(event) {
    const k = event.k;
    if (!candles || k.i !== config.interval) return;
    const time = Math.floor(k.t / 1000);
    if (time < lastCandleTime) return; // a trade's push of a candle older than the flat one the 2 s push already drew
    lastCandleTime = time;
    candles.update({ time, open: num(k.o), high: num(k.h), low: num(k.l), close: num(k.c) });
    volumes.update({ time, value: num(k.v), color: volumeColour(k.o, k.c) });
    root.dataset.lastKline = String(k.t);
    root.dataset.candles = String(Math.max(Number(root.dataset.candles || 0), 1));
  }

  function drawDepthChart(bids, asks) {
    if (!depthChart) return;
    let sum = 0;
    const bidPoints = bids.slice(0, 100).map(([price, qty]) => ({ time: num(price), value: (sum += num(qty)) })).reverse();
    sum = 0;
    const askPoints = asks.slice(0, 100).map(([price, qty]) => ({ time: num(price), value: (sum += num(qty)) }));
    depthBids.setData(bidPoints);
    depthAsks.setData(askPoints);
    depthChart.timeScale().fitContent();
  }

  // ----------------------------------------------------------------- trades and the 24-hour strip
  function onTrade(event) {
    const body = document.querySelector("#trades tbody");
    if (!body) return;
    const row = document.createElement("tr");
    const time = document.createElement("td");
    time.className = "muted";
    time.textContent = new Date(event.T).toISOString().slice(11, 19);
    const price = document.createElement("td");
    price.className = "num " + (event.m ? "sell" : "buy"); // m: the buyer was the maker, so the taker sold
    price.textContent = priceText(event.p);
    const qty = document.createElement("td");
    qty.className = "num";
    qty.textContent = shownText(event.q, config.baseShown);
    row.append(time, price, qty);
    const empty = body.querySelector("td[colspan]");
    if (empty) empty.parentElement.remove();
    body.prepend(row);
    while (body.rows.length > 25) body.deleteRow(-1);
  }

  function setStrip(values) {
    for (const [field, text] of Object.entries(values)) {
      const cell = document.querySelector(`#ticker-strip [data-field="${field}"]`);
      if (cell && text !== undefined && text !== null) cell.textContent = text;
    }
    const change = document.querySelector('#ticker-strip [data-field="change_percent"]');
    if (change) change.className = num(values.change_percent) < 0 ? "sell" : "buy";
  }

  function onTicker(event) {
    setStrip({
      last: priceText(event.c),
      change_percent: `${event.P}%`,
      high: priceText(event.h),
      low: priceText(event.l),
      volume: shownText(event.v, config.baseShown),
    });
  }

  // ------------------------------------------------------------- the user's orders and balances
  async function rememberOpenOrders() {
    if (!config.authenticated) return;
    const response = await fetch(api(`orders/?market=${config.symbol}&status=open`), { credentials: "same-origin" });
    if (!response.ok) return;
    for (const order of await response.json()) {
      if (order.price !== null) ownOrders.set(order.id, { side: order.side, price: order.price });
    }
    scheduleDraw();
  }

  function toast(text) {
    const box = document.getElementById("toasts");
    if (!box) return;
    const item = document.createElement("div");
    item.className = "toast";
    item.setAttribute("role", "status");
    item.textContent = text;
    box.append(item);
    setTimeout(() => item.remove(), 10000);
  }

  // Open orders, order history and fills, as the server renders them (amounts, cancel forms): after each
  // report of the user's on this market the page itself is fetched once more and the three tables swapped
  // in. Driven by the stream, never by a timer; one fetch at a time, and one more if reports came meanwhile.
  const ownTables = ["#open-orders", "#order-history", "#fills"];
  let tablesFetch = null;
  let tablesAgain = false;

  function refreshOwnTables() {
    if (tablesFetch) {
      tablesAgain = true;
      return;
    }
    tablesFetch = (async () => {
      try {
        const response = await fetch(location.pathname, { credentials: "same-origin", headers: { Accept: "text/html", ...background } });
        if (!response.ok) return;
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        for (const selector of ownTables) {
          const fresh = page.querySelector(selector);
          const shown = document.querySelector(selector);
          if (fresh && shown) shown.replaceWith(document.importNode(fresh, true));
        }
        root.dataset.ownTables = String(Number(root.dataset.ownTables || 0) + 1);
      } finally {
        tablesFetch = null;
        if (tablesAgain) {
          tablesAgain = false;
          refreshOwnTables();
        }
      }
    })();
  }

  function onExecutionReport(event) {
    if (event.s !== config.symbol.replace("-", "")) return;
    refreshOwnTables();
    const ended = ["FILLED", "CANCELED", "EXPIRED", "REJECTED"].includes(event.X);
    if (event.o === "LIMIT" && !ended) ownOrders.set(event.i, { side: event.S.toLowerCase(), price: event.p });
    if (ended) ownOrders.delete(event.i);
    const row = document.querySelector(`#open-orders tr[data-order="${event.i}"]`);
    if (row && ended) row.remove();
    if (row && !ended) {
      const filled = row.querySelector('[data-field="filled"]');
      if (filled) filled.textContent = shownText(event.z, config.baseShown);
    }
    if (event.x === "TRADE") {
      const how = event.X === "FILLED" ? "filled" : "partly filled";
      toast(`Your ${event.S.toLowerCase()} order #${event.i} ${how}: ${event.l} at ${event.L} (${event.z} of ${event.q} done).`);
    }
    scheduleDraw();
  }

  function onAccountPosition(event) {
    for (const balance of event.B) {
      const row = document.querySelector(`#market-balances tr[data-asset="${balance.a}"]`);
      if (!row) continue;
      const places = Number(row.dataset.places);
      row.querySelector('[data-field="available"]').textContent = shownText(balance.f, places);
      row.querySelector('[data-field="held"]').textContent = shownText(balance.l, places);
    }
  }

  // ------------------------------------------------------------------------- the one connection
  let socket = null;
  let userStream = null;
  let requestId = 0;
  let retryDelay = 500;

  async function streamKey() {
    if (!config.authenticated) return null;
    const response = await fetch(api("stream-token/"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), ...background },
    });
    return response.ok ? (await response.json()).token : null;
  }

  async function connect() {
    userStream = await streamKey();
    const names = [`${config.stream}@depth`, `${config.stream}@trade`, `${config.stream}@ticker`, `${config.stream}@kline_${config.interval}`];
    if (userStream) names.push(userStream);
    resetBook();
    socket = new WebSocket(`${config.streamsUrl}/stream?streams=${names.join("/")}`);
    socket.addEventListener("open", () => {
      // The server joined the streams before completing the handshake: a snapshot taken now is
      // continued by the first event after it (events before it are buffered and dropped by id).
      retryDelay = 500;
      takeSnapshot().then(() => {
        root.dataset.stream = "open";
      });
    });
    socket.addEventListener("message", (message) => {
      const envelope = JSON.parse(message.data);
      if (!envelope.stream) return; // answers to SUBSCRIBE / UNSUBSCRIBE
      const event = envelope.data;
      if (envelope.stream === userStream) {
        if (event.e === "executionReport") onExecutionReport(event);
        else if (event.e === "outboundAccountPosition") onAccountPosition(event);
        return;
      }
      if (event.e === "depthUpdate") onDepth(event);
      else if (event.e === "trade") onTrade(event);
      else if (event.e === "kline") onKline(event);
      else if (event.e === "24hrTicker") onTicker(event);
    });
    socket.addEventListener("close", () => {
      root.dataset.stream = "closed";
      setTimeout(connect, retryDelay); // a fresh snapshot follows the new connection's first event
      retryDelay = Math.min(retryDelay * 2, 10000);
    });
  }

  function switchInterval(interval) {
    if (interval === config.interval) return;
    const previous = config.interval;
    config.interval = interval;
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ method: "UNSUBSCRIBE", params: [`${config.stream}@kline_${previous}`], id: ++requestId }));
      socket.send(JSON.stringify({ method: "SUBSCRIBE", params: [`${config.stream}@kline_${interval}`], id: ++requestId }));
    }
    document.querySelectorAll("#intervals button").forEach((button) => {
      button.setAttribute("aria-pressed", String(button.dataset.interval === interval));
    });
    loadCandles(interval);
  }

  document.querySelectorAll("#intervals button").forEach((button) => {
    button.addEventListener("click", () => switchInterval(button.dataset.interval));
  });
  rememberOpenOrders();
  setUpCharts();
  loadCandles(config.interval);
  connect();
})();
