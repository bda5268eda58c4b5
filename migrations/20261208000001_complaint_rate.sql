-- The complaint rate of the last day (issue 40, the alert
-- LinktrackComplaintRateHigh in deploy/prometheus/alerts.yml): every
-- server counts the complaints received and the letters delivered in the
-- last 24 hours every few minutes (src/server/health_gauges.rs); these
-- indexes make each count a range read of one day's entries instead of
-- a scan of the whole table.
ALTER TABLE bounces ADD INDEX bounces_received (received_at, kind);
ALTER TABLE deliveries ADD INDEX deliveries_at (at, status);
