package main

// The two timed phases: latency at a fixed rate without coordinated omission,
// and redelivery lateness after the invisible deadline.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// latency: a paced producer and one consumer. Message i is due at epoch + i/rate
// (the schedule is fixed in advance); whatever is due is sent as one batch (at
// most -batch, at most -inflight batches in flight), stamped with each message's
// *intended* send time, so a stalled send does not hide the wait of the messages
// behind it. The consumer records receive time - intended time; messages
// intended in the first 0.5 s are warm-up and dropped. drain_after_end_s = last
// receive - scheduled end: ~0 when the system kept up.
func latency(ctx context.Context, o options) (map[string]any, error) {
	p, err := connect(ctx, o, roleProducer, "lat-producer")
	if err != nil {
		return nil, err
	}
	defer p.Close()
	c, err := connect(ctx, o, roleConsumer, "lat-consumer")
	if err != nil {
		return nil, err
	}
	defer c.Close()

	total := int(o.rate * o.duration.Seconds())
	interval := time.Duration(float64(time.Second) / o.rate)
	var sentTotal atomic.Int64
	var producerDone atomic.Bool
	epoch := time.Now()
	ctx, cancel := context.WithDeadline(ctx, epoch.Add(3*o.duration+10*time.Second))
	defer cancel()

	var wg sync.WaitGroup
	var sendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer producerDone.Store(true)
		sendErr = paced(ctx, o, p, epoch, total, interval, &sentTotal)
	}()

	var samples []float64
	received := 0
	var last time.Duration
	end := o.duration
	for ctx.Err() == nil {
		got, err := c.Receive(ctx, o.batch)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			cancel()
			wg.Wait()
			return nil, err
		}
		now := time.Since(epoch)
		if len(got) > 0 {
			last = now
			for _, d := range got {
				stamp, _, err := parseBody(d.body)
				if err != nil {
					return nil, err
				}
				if time.Duration(stamp) >= warmup {
					samples = append(samples, float64(now-time.Duration(stamp))/1e6)
				}
			}
			if err := c.Ack(ctx, got); err != nil {
				cancel()
				wg.Wait()
				return nil, err
			}
			received += len(got)
		}
		if producerDone.Load() && int64(received) >= sentTotal.Load() {
			break
		}
		if now > end+drainCap {
			break // bounded drain after the schedule
		}
	}
	cancel()
	wg.Wait()
	if sendErr != nil && sendErr != context.Canceled && sendErr != context.DeadlineExceeded {
		return nil, sendErr
	}
	figures := distribution(samples, 3)
	delete(figures, "min_ms")
	figures["target_rate_per_s"] = round(o.rate, 1)
	figures["drain_after_end_s"] = round((last - end).Seconds(), 3)
	figures["sent"] = sentTotal.Load()
	figures["received"] = received
	return figures, nil
}

func paced(ctx context.Context, o options, p client, epoch time.Time, total int, interval time.Duration, sentTotal *atomic.Int64) error {
	slots := make(chan struct{}, o.inflight)
	var wg sync.WaitGroup
	var once sync.Once
	var failure error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seq := 0
	for seq < total && ctx.Err() == nil {
		due := min(total, int(time.Since(epoch)/interval)+1)
		if due <= seq {
			sleep(ctx, time.Until(epoch.Add(time.Duration(seq)*interval)))
			continue
		}
		select { // at most -inflight batches in flight
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		due = min(total, int(time.Since(epoch)/interval)+1)
		n := min(o.batch, due-seq)
		bodies := make([][]byte, n)
		for i := range bodies {
			intended := time.Duration(seq+i) * interval
			bodies[i] = makeBody(o.bodyBytes, seq+i, intended.Nanoseconds())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if err := p.Send(ctx, bodies); err != nil {
				once.Do(func() { failure = err; cancel() })
			}
		}()
		seq += n
		sentTotal.Store(int64(seq))
	}
	wg.Wait()
	return failure
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// redelivery: send -count messages, receive them without acking, 8 per receive
// with 37 ms between receives (so the deadlines fall at different phases of each
// system's timers), then keep receiving. Each message's deadline is the start of
// the request that set its invisibility + that invisible time: the receive, or,
// with -change-invisible-s (v2 only), the ChangeInvisibleDuration that set it
// right after the receive. Lateness = when it came back - deadline; an upper
// bound (it includes up to one round trip).
func redelivery(ctx context.Context, o options) (map[string]any, error) {
	c, err := connect(ctx, o, roleConsumer, "redeliver")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for first := 0; first < o.count; first += o.batch {
		n := min(o.batch, o.count-first)
		bodies := make([][]byte, n)
		for i := range bodies {
			bodies[i] = makeBody(o.bodyBytes, first+i, 0)
		}
		if err := c.Send(ctx, bodies); err != nil {
			return nil, err
		}
	}
	changer, _ := c.(invisibilityChanger)
	change := o.changeTo > 0
	if change && changer == nil {
		return nil, phaseError("-change-invisible-s: %s has no ChangeInvisibleDuration", o.system)
	}
	invisible := o.invisible
	if change {
		invisible = o.changeTo
	}
	stop := time.Now().Add(o.invisible + redeliverCap)
	deadlineOf := map[int]time.Time{}
	for len(deadlineOf) < o.count && time.Now().Before(stop) {
		asked := time.Now()
		got, err := c.Receive(ctx, spreadBatch)
		if err != nil {
			return nil, err
		}
		for i := range got {
			_, seq, err := parseBody(got[i].body)
			if err != nil {
				return nil, err
			}
			if _, seen := deadlineOf[seq]; seen {
				continue
			}
			deadlineOf[seq] = asked.Add(invisible)
			if change {
				changed := time.Now()
				if err := changer.ChangeInvisible(ctx, &got[i], invisible); err != nil {
					return nil, err
				}
				deadlineOf[seq] = changed.Add(invisible)
			}
		}
		sleep(ctx, spreadGap)
	}
	var lateness []float64
	early := 0
	seen := map[int]bool{}
	for len(seen) < len(deadlineOf) && time.Now().Before(stop) {
		got, err := c.Receive(ctx, o.batch)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		for _, d := range got {
			_, seq, err := parseBody(d.body)
			if err != nil {
				return nil, err
			}
			deadline, ours := deadlineOf[seq]
			if seen[seq] || !ours {
				continue
			}
			seen[seq] = true
			late := float64(now.Sub(deadline)) / 1e6
			if late < 0 {
				early++
			}
			lateness = append(lateness, late)
		}
		if len(got) > 0 {
			if err := c.Ack(ctx, got); err != nil {
				return nil, err
			}
		}
	}
	figures := distribution(lateness, 1)
	delete(figures, "samples")
	figures["invisible_s"] = invisible.Seconds()
	figures["messages"] = o.count
	figures["received_first"] = len(deadlineOf)
	figures["returned"] = len(lateness)
	figures["early"] = early
	figures["via"] = "receive"
	if change {
		figures["via"] = "change_invisible_duration"
	}
	if len(deadlineOf) < o.count {
		return nil, phaseError("redelivery: received %d of %d messages before the cap", len(deadlineOf), o.count)
	}
	return figures, nil
}
