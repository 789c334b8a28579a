package main

// Prometheus metrics, eldr_epp_*: on -metrics-addr under /metrics, beside
// the Go runtime's.

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// counterValue reads a counter (for the bench and demo summaries).
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

type metrics struct {
	reg                *prometheus.Registry
	log                *slog.Logger
	requests           *prometheus.CounterVec // outcome: completed, cancelled, upstream_error
	picks              *prometheus.CounterVec // by: eldr, least_loaded
	fallbacks          *prometheus.CounterVec // reason
	rejected           *prometheus.CounterVec // reason: an ImmediateResponse
	inflight           prometheus.Gauge
	pickSeconds        prometheus.Histogram
	configLoads        *prometheus.CounterVec // result
	tableLoads         *prometheus.CounterVec // result
	scrapes            *prometheus.CounterVec // result
	eldrCompleteErrors prometheus.Counter
	servedElsewhere    prometheus.Counter
	streamErrors       prometheus.Counter
}

func newMetrics(log *slog.Logger, pool func() *Pool) *metrics {
	reg := prometheus.NewRegistry()
	f := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "eldr_epp_" + name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	m := &metrics{
		reg:         reg,
		log:         log,
		requests:    f("requests_total", "Requests that held a pick, by how they ended.", "outcome"),
		picks:       f("picks_total", "Picks, by what chose the endpoint.", "by"),
		fallbacks:   f("fallbacks_total", "Picks eldr could not make, by reason (they went least-loaded).", "reason"),
		rejected:    f("rejected_total", "Requests answered with an ImmediateResponse, by reason.", "reason"),
		configLoads: f("config_loads_total", "Config file loads, by result (an error keeps the last good config).", "result"),
		tableLoads:  f("table_loads_total", "Table file loads (embedded router), by result.", "result"),
		scrapes:     f("scrapes_total", "Engine metrics scrapes, by result.", "result"),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "eldr_epp_inflight_requests",
			Help: "Requests holding a pick (released on the response's end, a cancel or an error)."}),
		pickSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "eldr_epp_pick_seconds",
			Help:    "Time in the picker per request: its headers received to the pick sent (the whole body read, parsed and routed).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 16)}),
		eldrCompleteErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "eldr_epp_eldr_complete_errors_total",
			Help: "Completes eldr refused (its router or daemon restarted since the pick)."}),
		servedElsewhere: prometheus.NewCounter(prometheus.CounterOpts{Name: "eldr_epp_served_by_fallback_total",
			Help: "Requests the data plane served on a fallback endpoint."}),
		streamErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "eldr_epp_stream_errors_total",
			Help: "ext_proc streams that ended with an error (the proxy went away mid-request)."}),
	}
	reg.MustRegister(m.inflight, m.pickSeconds, m.eldrCompleteErrors, m.servedElsewhere, m.streamErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&endpointCollector{pool: pool})
	return m
}

// endpointCollector reports every endpoint of the current config.
type endpointCollector struct{ pool func() *Pool }

var (
	endpointInflight = prometheus.NewDesc("eldr_epp_endpoint_inflight",
		"Requests this picker sent to the endpoint that have not ended.", []string{"endpoint", "role"}, nil)
	endpointLoad = prometheus.NewDesc("eldr_epp_endpoint_load",
		"The load picks compare: the larger of the own count and the engine's running + waiting.",
		[]string{"endpoint", "role"}, nil)
	endpointReady = prometheus.NewDesc("eldr_epp_endpoint_ready",
		"1 while the endpoint may be picked (its scrapes succeed).", []string{"endpoint", "role"}, nil)
)

func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- endpointInflight
	ch <- endpointLoad
	ch <- endpointReady
}

func (c *endpointCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.pool()
	if p == nil {
		return
	}
	now := time.Now()
	for _, e := range p.all {
		ready := 0.0
		if e.ready() {
			ready = 1
		}
		labels := []string{e.Address, string(e.Role)}
		ch <- prometheus.MustNewConstMetric(endpointInflight, prometheus.GaugeValue,
			float64(e.inflight.Load()+e.prefilling.Load()), labels...)
		ch <- prometheus.MustNewConstMetric(endpointLoad, prometheus.GaugeValue,
			float64(e.load(time.Minute, now)), labels...)
		ch <- prometheus.MustNewConstMetric(endpointReady, prometheus.GaugeValue, ready, labels...)
	}
}
