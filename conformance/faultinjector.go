package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// FaultInjector is a client of Redis's fault injector HTTP API, the service
// the client libraries' scenario suites drive against Redis Enterprise
// clusters (and that mainttest.FaultInjector emulates): POST /action
// {type, parameters} answers {action_id}; GET /action/{id} answers
// {action_id, status, error, output} until the status is success or failed.
type FaultInjector struct {
	// BaseURL is the API's root, such as FAULT_INJECTION_API_URL.
	BaseURL string
	// HTTP is the client used; nil means one with a 30 s timeout.
	HTTP *http.Client
}

// ActionStatus is the answer of GET /action/{id}.
type ActionStatus struct {
	ActionID string         `json:"action_id"`
	Status   string         `json:"status"`
	Error    any            `json:"error"`
	Output   map[string]any `json:"output"`
}

// Done reports whether the action ended (success, finished or failed).
func (s ActionStatus) Done() bool {
	switch s.Status {
	case "success", "finished", "failed", "cancelled":
		return true
	}
	return false
}

// Step is one action of a sequence_of_actions.
type Step struct {
	Type   string         `json:"type"`
	Params map[string]any `json:"params"`
}

func (f *FaultInjector) client() *http.Client {
	if f.HTTP != nil {
		return f.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

func (f *FaultInjector) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("conformance: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(f.BaseURL, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("conformance: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := f.client().Do(req)
	if err != nil {
		return fmt.Errorf("conformance: %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("conformance: %s %s: %w", method, path, err)
	}
	if res.StatusCode >= 400 {
		return fmt.Errorf("conformance: %s %s: HTTP %d: %s", method, path, res.StatusCode, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("conformance: %s %s: decode %q: %w", method, path, b, err)
	}
	return nil
}

// Trigger starts an action and returns its id.
func (f *FaultInjector) Trigger(ctx context.Context, typ string, params map[string]any) (string, error) {
	var res struct {
		ActionID string `json:"action_id"`
	}
	if err := f.do(ctx, "POST", "/action", map[string]any{"type": typ, "parameters": params}, &res); err != nil {
		return "", err
	}
	if res.ActionID == "" {
		return "", fmt.Errorf("conformance: POST /action %s: no action_id", typ)
	}
	return res.ActionID, nil
}

// Status returns an action's status.
func (f *FaultInjector) Status(ctx context.Context, id string) (ActionStatus, error) {
	var s ActionStatus
	err := f.do(ctx, "GET", "/action/"+id, nil, &s)
	return s, err
}

// Wait polls an action every poll until it ends or ctx does; an action that
// failed is an error.
func (f *FaultInjector) Wait(ctx context.Context, id string, poll time.Duration) (ActionStatus, error) {
	for {
		s, err := f.Status(ctx, id)
		if err == nil && s.Done() {
			if s.Status == "failed" || s.Status == "cancelled" {
				return s, fmt.Errorf("conformance: action %s %s: %v", id, s.Status, s.Error)
			}
			return s, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return s, fmt.Errorf("conformance: waiting for action %s: %w (last error %v)", id, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Run triggers an action and waits for it.
func (f *FaultInjector) Run(ctx context.Context, typ string, params map[string]any, poll time.Duration) (ActionStatus, error) {
	id, err := f.Trigger(ctx, typ, params)
	if err != nil {
		return ActionStatus{}, err
	}
	return f.Wait(ctx, id, poll)
}

// Sequence is the parameters of a sequence_of_actions on one database, in
// the form node-redis sends (each step's parameters under "params").
func Sequence(bdbID int, steps ...Step) map[string]any {
	for i := range steps {
		if steps[i].Params == nil {
			steps[i].Params = map[string]any{}
		}
		steps[i].Params["bdb_id"] = fmt.Sprint(bdbID)
		steps[i].Params["cluster_index"] = "0"
	}
	return map[string]any{"bdb_id": fmt.Sprint(bdbID), "actions": steps}
}
