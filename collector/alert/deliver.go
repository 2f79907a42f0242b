package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nbs-project/nbs/collector/alert/notify/alertmanager"
	"github.com/nbs-project/nbs/collector/alert/notify/webhook"
)

const (
	targetAlertmanager = "alertmanager"
	targetWebhook      = "webhook"
	// resendFactor: a firing alert's endsAt is this many resend intervals
	// ahead, as Prometheus does, so one lost post does not resolve it.
	resendFactor = 4
	// resolvedResend: resolves are re-posted to Alertmanager for this long,
	// in case the first post was lost.
	resolvedResend = 15 * time.Minute
	// maxDeliveryAge: a notification still failing after this is given up
	// (and stays in the log as failed).
	maxDeliveryAge = 24 * time.Hour
	maxBackoff     = 5 * time.Minute
)

// outbox builds the notifications announcing a transition, one per target;
// the repo queues them in the transition's transaction. While the alert's
// identity is silenced the webhook, which has no silences of its own, is
// not sent; Alertmanager still is, and applies its copy of the silence.
func (s *Service) outbox(inst *Instance, event string, silenced bool) ([]outboxEntry, error) {
	var out []outboxEntry
	if len(s.cfg.AlertmanagerURLs) > 0 {
		a := amAlert(inst, time.Time{})
		if event == "resolved" {
			a.EndsAt = inst.ResolvedAt
		}
		payload, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("encode alert %d: %w", inst.ID, err)
		}
		for _, u := range s.cfg.AlertmanagerURLs {
			out = append(out, outboxEntry{target: targetAlertmanager, url: u, payload: payload})
		}
	}
	if s.webhook != nil && !silenced {
		payload, err := json.Marshal(webhookMessage(inst, event))
		if err != nil {
			return nil, fmt.Errorf("encode alert %d: %w", inst.ID, err)
		}
		out = append(out, outboxEntry{target: targetWebhook, url: s.cfg.WebhookURL, payload: payload})
	}
	return out, nil
}

func amAlert(inst *Instance, endsAt time.Time) alertmanager.Alert {
	return alertmanager.Alert{Labels: inst.Labels, Annotations: inst.Annotations, StartsAt: inst.FiredAt,
		EndsAt: endsAt, GeneratorURL: inst.Annotations["tree_url"]}
}

func webhookMessage(inst *Instance, event string) webhook.Message {
	a := webhook.Alert{ID: inst.ID, Fingerprint: inst.Fingerprint, Rule: inst.RuleName, Severity: inst.Severity,
		Group: inst.Group, Labels: nonNil(inst.Labels), Annotations: nonNil(inst.Annotations), Value: inst.Headline,
		StartsAt: inst.FiredAt, TreeURL: inst.Annotations["tree_url"]}
	if inst.Kind == KindNode {
		a.Node, a.Root, a.Metric = inst.Node, rootOf(inst.Metric), inst.Child
	}
	if event == "resolved" {
		t := inst.ResolvedAt
		a.EndsAt = &t
	}
	return webhook.Message{Version: "1", Delivery: fmt.Sprintf("%d-%s", inst.ID, event), Status: event, Alert: a}
}

// deliver drains the outbox and re-posts firing alerts to Alertmanager
// while this collector leads. Posting everything once at the start of a
// term makes a new leader's Alertmanagers current at once, without paging
// again: Alertmanager deduplicates by labels, which are frozen.
func (s *Service) deliver(ctx context.Context) {
	resend := time.NewTicker(s.cfg.ResendInterval)
	defer resend.Stop()
	s.resend(ctx)
	for {
		wait := s.deliverDue(ctx)
		timer := time.NewTimer(wait)
		select {
		case <-s.sendWake:
		case <-timer.C:
		case <-resend.C:
			s.resend(ctx)
		case <-ctx.Done():
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// deliverDue sends every due outbox row and returns how long until the
// next one is due.
func (s *Service) deliverDue(ctx context.Context) time.Duration {
	const idle = 5 * time.Second
	pending, err := s.repo.pendingDeliveries(ctx, 1000)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("read alert outbox", "err", err)
		}
		return idle
	}
	if len(pending) == 0 {
		return idle
	}
	now := time.Now()
	next := now.Add(idle)
	amBatches := map[string][]outboxRow{}
	blocked := map[int64]bool{} // webhook: an instance whose earlier notification is still undelivered
	for _, r := range pending {
		switch {
		case now.Sub(r.created) > maxDeliveryAge:
			s.markFailed(ctx, []int64{r.id}, fmt.Sprintf("given up after %s", maxDeliveryAge))
		case !s.configured(r.target, r.url):
			s.markFailed(ctx, []int64{r.id}, "target no longer configured on the leading collector")
		case r.due.After(now):
			next = minTime(next, r.due)
			if r.target == targetWebhook {
				blocked[r.instance] = true
			}
		case r.target == targetAlertmanager:
			amBatches[r.url] = append(amBatches[r.url], r)
		case blocked[r.instance]:
			// Resolved must not overtake firing at the receiver.
		default:
			if !s.sendWebhook(ctx, r) {
				blocked[r.instance] = true
				next = minTime(next, now.Add(backoff(r.attempts+1)))
			}
		}
	}
	for u, batch := range amBatches {
		if !s.sendAlertmanager(ctx, u, batch) {
			next = minTime(next, now.Add(backoff(batch[0].attempts+1)))
		}
	}
	return max(time.Until(next), 10*time.Millisecond)
}

func (s *Service) configured(target, u string) bool {
	switch target {
	case targetAlertmanager:
		return slices.Contains(s.cfg.AlertmanagerURLs, u)
	case targetWebhook:
		return s.webhook != nil && s.cfg.WebhookURL == u
	}
	return false
}

// sendAlertmanager posts a batch to one Alertmanager. Of several queued
// notifications for one alert only the newest is sent (a resolve
// supersedes the firing it follows); all are marked delivered together.
func (s *Service) sendAlertmanager(ctx context.Context, u string, batch []outboxRow) bool {
	newest := map[int64]outboxRow{}
	for _, r := range batch {
		if cur, ok := newest[r.instance]; !ok || r.id > cur.id {
			newest[r.instance] = r
		}
	}
	alerts := make([]alertmanager.Alert, 0, len(newest))
	endsAt := time.Now().Add(resendFactor * s.cfg.ResendInterval)
	for _, r := range newest {
		var a alertmanager.Alert
		if err := json.Unmarshal(r.payload, &a); err != nil {
			s.log.Error("undecodable alertmanager payload", "delivery", r.id, "err", err)
			continue
		}
		if r.event == "firing" {
			a.EndsAt = endsAt
		}
		alerts = append(alerts, a)
	}
	ids := make([]int64, len(batch))
	for i, r := range batch {
		ids[i] = r.id
	}
	// A send in flight finishes and is recorded even when the term ends
	// meanwhile (the clients time out on their own): cut short, the
	// receiver could have it while the successor sends it again.
	if err := s.post(context.WithoutCancel(ctx), u, alerts); err != nil {
		s.log.Warn("deliver to alertmanager", "url", u, "alerts", len(alerts), "attempt", batch[0].attempts+1, "err", err)
		s.markRetry(ctx, ids, batch[0].attempts+1, err)
		return false
	}
	s.markDelivered(ctx, ids)
	return true
}

func (s *Service) sendWebhook(ctx context.Context, r outboxRow) bool {
	var m webhook.Message
	key := fmt.Sprint(r.id)
	if err := json.Unmarshal(r.payload, &m); err == nil {
		key = m.Delivery
	}
	inflight := context.WithoutCancel(ctx) // as in sendAlertmanager
	if err := s.notified(targetWebhook, func() error { return s.webhook.Send(inflight, r.url, key, r.event, r.payload) }); err != nil {
		s.log.Warn("deliver to webhook", "url", r.url, "delivery", key, "attempt", r.attempts+1, "err", err)
		s.markRetry(ctx, []int64{r.id}, r.attempts+1, err)
		return false
	}
	s.markDelivered(ctx, []int64{r.id})
	return true
}

// backoff doubles from one second to maxBackoff, with jitter so a fleet of
// failures does not retry in lockstep.
func backoff(attempt int) time.Duration {
	d := time.Second << min(attempt-1, 16)
	d = min(d, maxBackoff)
	return d + rand.N(d/4+1)
}

// post sends alerts to one Alertmanager.
func (s *Service) post(ctx context.Context, u string, alerts []alertmanager.Alert) error {
	return s.notified(targetAlertmanager, func() error { return s.am.Post(ctx, u, alerts) })
}

// notified runs one notification and counts it, as Alertmanager counts its
// own: attempts, failures and latency per integration.
func (s *Service) notified(integration string, send func() error) error {
	start := time.Now()
	err := send()
	s.metrics.NotificationLatency.WithLabelValues(integration).Observe(time.Since(start).Seconds())
	s.metrics.Notifications.WithLabelValues(integration).Inc()
	if err != nil {
		s.metrics.NotificationsFailed.WithLabelValues(integration).Inc()
	}
	return err
}

func (s *Service) markDelivered(ctx context.Context, ids []int64) {
	// The receiver has it: record that even when the term is ending (a
	// stop, a lost lead), or the successor sends it again. lead waits for
	// this before the term's lock is released, so the successor reads the
	// outbox after it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.repo.markDelivered(ctx, ids); err != nil {
		// The next round sends these again: a duplicate, never a loss.
		s.log.Warn("record delivered alerts", "err", err)
	}
}

func (s *Service) markRetry(ctx context.Context, ids []int64, attempt int, cause error) {
	if err := s.repo.markRetry(ctx, ids, time.Now().Add(backoff(attempt)), cause.Error()); err != nil && ctx.Err() == nil {
		s.log.Warn("record failed alert delivery", "err", err)
	}
}

func (s *Service) markFailed(ctx context.Context, ids []int64, why string) {
	if err := s.repo.markFailed(ctx, ids, why); err != nil && ctx.Err() == nil {
		s.log.Warn("record given-up alert delivery", "err", err)
	}
}

// resend posts every firing alert, and recent resolves, to each
// Alertmanager: the steady cadence Alertmanager expects from a client.
func (s *Service) resend(ctx context.Context) {
	if len(s.cfg.AlertmanagerURLs) == 0 {
		return
	}
	insts, err := s.repo.firingOrResolvedWithin(ctx, resolvedResend)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("read alerts to re-send", "err", err)
		}
		return
	}
	if len(insts) == 0 {
		return
	}
	endsAt := time.Now().Add(resendFactor * s.cfg.ResendInterval)
	alerts := make([]alertmanager.Alert, 0, len(insts))
	for i := range insts {
		inst := &insts[i].Instance
		if inst.State == Resolved {
			alerts = append(alerts, amAlert(inst, inst.ResolvedAt))
		} else {
			alerts = append(alerts, amAlert(inst, endsAt))
		}
	}
	for _, u := range s.cfg.AlertmanagerURLs {
		for chunk := range slices.Chunk(alerts, 1000) {
			if err := s.post(ctx, u, chunk); err != nil && ctx.Err() == nil {
				s.log.Warn("re-send alerts to alertmanager", "url", u, "alerts", len(chunk), "err", err)
			}
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
