package phases

import (
	"context"
	"errors"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

type testScope struct {
	halted bool
	ran    []string
}

func (s *testScope) Halted() bool { return s.halted }

func phase(name string, res ctrl.Result, err error, halt bool) Phase[*testScope] {
	return func(_ context.Context, s *testScope) (ctrl.Result, error) {
		s.ran = append(s.ran, name)
		s.halted = halt
		return res, err
	}
}

func TestRun(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		phases  []Phase[*testScope]
		wantRan []string
		wantRes ctrl.Result
		wantErr error
	}{
		{name: "all run, the soonest requeue wins",
			phases:  []Phase[*testScope]{phase("a", ctrl.Result{RequeueAfter: time.Minute}, nil, false), phase("b", ctrl.Result{}, nil, false), phase("c", ctrl.Result{RequeueAfter: time.Second}, nil, false)},
			wantRan: []string{"a", "b", "c"}, wantRes: ctrl.Result{RequeueAfter: time.Second}},
		{name: "a halt stops the phases after it and keeps what ran",
			phases:  []Phase[*testScope]{phase("a", ctrl.Result{RequeueAfter: time.Minute}, nil, false), phase("b", ctrl.Result{RequeueAfter: 5 * time.Second}, nil, true), phase("c", ctrl.Result{}, nil, false)},
			wantRan: []string{"a", "b"}, wantRes: ctrl.Result{RequeueAfter: 5 * time.Second}},
		{name: "an error stops everything and drops the requeues",
			phases:  []Phase[*testScope]{phase("a", ctrl.Result{RequeueAfter: time.Minute}, nil, false), phase("b", ctrl.Result{}, boom, false), phase("c", ctrl.Result{}, nil, false)},
			wantRan: []string{"a", "b"}, wantErr: boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &testScope{}
			res, err := Run(context.Background(), s, tc.phases...)
			if !errors.Is(err, tc.wantErr) || res != tc.wantRes || len(s.ran) != len(tc.wantRan) {
				t.Fatalf("Run = %+v, %v after %v; want %+v, %v after %v", res, err, s.ran, tc.wantRes, tc.wantErr, tc.wantRan)
			}
			for i := range s.ran {
				if s.ran[i] != tc.wantRan[i] {
					t.Errorf("ran %v, want %v", s.ran, tc.wantRan)
				}
			}
		})
	}
}
