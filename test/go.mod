module github.com/kairos-capi/kairos-capi/test

go 1.26.0
