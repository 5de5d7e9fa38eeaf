// The live parts of the office status page (provision/status_page/page.py, render_page(live=...)).
// Every value read here (the gateway's CSV, Prometheus's JSON) reaches the page as textContent or as
// numbers given to uPlot, never as markup; a host is found by comparing names, never by a selector.
(function () {
  'use strict';
  var config = JSON.parse(document.getElementById('live-config').textContent);
  var cards = Array.prototype.slice.call(document.querySelectorAll('.host[data-host-name]'));
  var summary = document.getElementById('gateway-summary');
  var plots = {};

  function cardOf(name) {
    for (var i = 0; i < cards.length; i++) { if (cards[i].getAttribute('data-host-name') === name) { return cards[i]; } }
    return null;
  }

  // HAProxy's stats CSV: a header line '# pxname,svname,...', then one line per proxy and server
  // (https://docs.haproxy.org/2.6/management.html#9.1). Fields are read by their header's names.
  function parseStats(text) {
    var lines = text.split('\n'), names = lines[0].replace(/^# /, '').split(','), rows = [];
    for (var i = 1; i < lines.length; i++) {
      if (!lines[i]) { continue; }
      var values = lines[i].split(','), row = {};
      for (var j = 0; j < names.length; j++) { row[names[j]] = values[j]; }
      rows.push(row);
    }
    return rows;
  }

  function stateClass(status) {
    if (status === 'UP') { return 'ok'; }
    if (/^(DRAIN|NOLB|MAINT|UP )/.test(status)) { return 'warn'; }
    return 'bad';
  }

  function showStats(rows) {
    var servers = rows.filter(function (row) {
      return row.pxname === config.backend && row.svname !== 'FRONTEND' && row.svname !== 'BACKEND';
    });
    var up = 0;
    servers.forEach(function (server) {
      if (server.status === 'UP') { up++; }
      var card = cardOf(server.svname);
      if (!card) { return; }
      var badge = card.querySelector('.state');
      if (badge.textContent !== server.status) {
        badge.textContent = server.status;
        badge.className = 'badge state ' + stateClass(server.status);
        card.setAttribute('data-state', server.status);
      }
      card.querySelector('.counters').textContent = server.scur + ' in flight, ' + server.qcur + ' queued, ' +
        server.stot + ' served; last check ' + (server.check_status || '-') + '; state for ' + server.lastchg + ' s';
    });
    summary.textContent = up + ' of ' + servers.length + ' backends UP at the gateway; read ' +
      new Date().toLocaleTimeString();
    summary.className = up === servers.length ? 'ok' : 'bad';
    document.body.setAttribute('data-gateway', 'read');
  }

  function pollStats() {
    fetch(config.stats, { cache: 'no-store' }).then(function (response) {
      if (!response.ok) { throw new Error('HTTP ' + response.status); }
      return response.text();
    }).then(function (text) { showStats(parseStats(text)); }).catch(function (error) {
      summary.textContent = 'the gateway\'s state cannot be read: ' + error.message;
      summary.className = 'bad';
      cards.forEach(function (card) {
        var badge = card.querySelector('.state');
        badge.textContent = 'unknown';
        badge.className = 'badge state bad';
        card.setAttribute('data-state', 'unknown');
      });
    }).then(function () { setTimeout(pollStats, config.interval_ms); });
  }

  // Prometheus's range query answers a matrix: per series its labels and [time, "value"] pairs at
  // start + k * step (https://prometheus.io/docs/prometheus/latest/querying/api/#range-queries).
  function queryRange(query, start, end) {
    var url = config.query_range + '?query=' + encodeURIComponent(query) + '&start=' + start + '&end=' + end +
      '&step=' + config.step_s;
    return fetch(url, { cache: 'no-store' }).then(function (response) {
      if (!response.ok) { throw new Error('metrics: HTTP ' + response.status); }
      return response.json();
    }).then(function (answer) {
      if (answer.status !== 'success') { throw new Error('metrics: ' + String(answer.error)); }
      return answer.data.result;
    });
  }

  function draw(box, chart, xs, columns) {
    var key = box.getAttribute('data-chart') + '/' + box.getAttribute('data-host-index');
    // from the first sample on: a Prometheus started a minute ago fills the width, not its last pixels
    var first = xs.length;
    columns.forEach(function (column) {
      for (var i = 0; i < column.length; i++) { if (column[i] !== null) { first = Math.min(first, i); break; } }
    });
    var data = [xs.slice(first)].concat(columns.map(function (column) { return column.slice(first); }));
    var values = [].concat.apply([], data.slice(1)).filter(function (v) { return v !== null; });
    box.setAttribute('data-samples', String(values.length));
    box.setAttribute('data-max', String(Math.max.apply(null, values)));
    if (plots[key]) { plots[key].setData(data); return; }
    box.textContent = '';
    var width = function () { return Math.max(260, box.clientWidth); };
    var series = [{}].concat(chart.series.map(function (entry) {
      return { label: entry[0], stroke: entry[1], width: 2 };
    }));
    plots[key] = new uPlot({
      width: width(), height: 180, series: series,
      // a single sample yet (Prometheus just started): a minute each side, not uPlot's 1000 days
      scales: { x: { time: true, range: function (u, min, max) {
                  var xs = u.data[0];
                  return xs.length === 1 ? [xs[0] - 60, xs[0] + 60] : [min, max]; } },
                y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.15)]; } } },
      axes: [{}, { label: chart.unit }]
    }, data, box);
    new ResizeObserver(function () { plots[key].setSize({ width: width(), height: 180 }); }).observe(box);
  }

  // One chart for every host: its series from Prometheus, true when each host had samples.
  function refreshChart(chart, start, end, xs) {
    return Promise.all(chart.series.map(function (entry) { return queryRange(entry[2], start, end); }))
      .then(function (results) {
        var all = true;
        cards.forEach(function (card) {
          var name = card.getAttribute('data-host-name'), found = false;
          var columns = results.map(function (result) {
            var byTime = {};
            result.forEach(function (series) {
              if (series.metric[config.host_label] !== name) { return; }
              series.values.forEach(function (pair) { byTime[Math.round(pair[0])] = parseFloat(pair[1]); found = true; });
            });
            return xs.map(function (x) { return x in byTime ? byTime[x] : null; });
          });
          var box = card.querySelector('.chart.live[data-chart="' + chart.key + '"]');
          if (found) {
            draw(box, chart, xs, columns);
          } else {
            all = false;
            var empty = box.querySelector('.empty');
            if (empty) { empty.textContent = 'no samples of this host in the last ' + config.window_s / 60 + ' min'; }
          }
        });
        return all;
      }).catch(function (error) {
        cards.forEach(function (card) {
          var empty = card.querySelector('.chart.live[data-chart="' + chart.key + '"] .empty');
          if (empty) { empty.textContent = error.message; }
        });
        return false;
      });
  }

  // Every chart_refresh_s; sooner (every 3 s) while a host has no samples yet (Prometheus just started).
  function refreshCharts() {
    var end = Math.floor(Date.now() / 1000), start = end - config.window_s;
    var xs = [];
    for (var t = start; t <= end; t += config.step_s) { xs.push(t); }
    Promise.all(config.charts.map(function (chart) { return refreshChart(chart, start, end, xs); }))
      .then(function (found) {
        var complete = found.every(function (each) { return each; });
        setTimeout(refreshCharts, complete ? config.chart_refresh_s * 1000 : Math.min(3000, config.chart_refresh_s * 1000));
      });
  }

  pollStats();
  refreshCharts();
})();
