//! The HTTP API (axum): the routes of `openapi.json`, each client's token, limits and own
//! data, bounded bodies, long polls, and JSON errors that name the problem and never a
//! server path, a secret or another client's data.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::answer::{blocking, Answer, ApiError};
use super::auth::{Client, Clients};
use super::board;
use super::fleet::now;
use super::metrics::Metrics;
use super::store::{Filter, Known, Limits, NewRow, Pass, Refusal, Row, Store};
use super::verdict::{cache_key, Verdict};
use super::worker::Wake;

/// A request body's limit (a batch of sources with its JSON).
pub(crate) const MAX_BODY: usize = 4 << 20;
/// One kernel source's limit.
const MAX_SOURCE: usize = 1 << 20;
/// Submissions per request, ids per poll.
const MAX_BATCH: usize = 256;
/// The longest long poll.
const MAX_WAIT_S: f64 = 60.0;
/// The longest a request body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Every route the service answers, as `openapi.json` lists them (a test holds the two equal).
pub(crate) const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/submissions"),
    ("GET", "/v1/submissions"),
    ("GET", "/v1/submissions/{id}"),
    ("GET", "/v1/export"),
    ("GET", "/v1/problems"),
    ("GET", "/v1/leaderboard"),
    ("GET", "/leaderboard"),
    ("GET", "/v1/health"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
];

pub(crate) const OPENAPI: &str = include_str!("openapi.json");

/// A problem as clients see it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProblemInfo {
    pub(crate) id: String,
    pub(crate) level: u8,
    pub(crate) name: String,
    #[serde(skip)]
    pub(crate) sha256: String,
}

pub(crate) struct App {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clients: Clients,
    pub(crate) problems: BTreeMap<String, ProblemInfo>,
    pub(crate) max_queue: u64,
    pub(crate) leaderboard: bool,
    pub(crate) title: String,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) wake: Arc<Wake>,
    /// The fleets' identities once a worker has registered them.
    pub(crate) fleets: Mutex<BTreeMap<&'static str, String>>,
    pub(crate) board: board::PageCache,
}

type Shared = Arc<App>;

/// The request's client, within its request rate.
fn client<'a>(app: &'a App, headers: &HeaderMap) -> Answer<&'a Client> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(c) = app.clients.find(auth) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid `Authorization: Bearer <token>` header is needed",
        ));
    };
    c.request().map_err(|w| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "over this token's request rate",
        )
        .retry(w.retry_after_s)
    })?;
    Ok(c)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitRequest {
    submissions: Vec<NewSubmission>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSubmission {
    problem: String,
    source: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    remeasure: bool,
    #[serde(default)]
    ranked: bool,
}

#[derive(Serialize)]
struct SubmitResponse {
    ids: Vec<String>,
}

fn random_id() -> anyhow::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

impl App {
    /// The fleet identity of `pass`, once a worker has registered it.
    fn fleet(&self, pass: Pass) -> anyhow::Result<Option<String>> {
        if let Some(f) = self
            .fleets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(pass.name())
        {
            return Ok(Some(f.clone()));
        }
        let f = self.store.fleet(pass)?;
        if let Some(f) = &f {
            self.fleets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(pass.name(), f.clone());
        }
        Ok(f)
    }

    /// A submission checked and looked up in the verdict cache.
    fn new_row(&self, i: usize, s: NewSubmission) -> Answer<(NewRow, String)> {
        let at = |m: String| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_submission",
                format!("submission {i}: {m}"),
            )
        };
        let Some(p) = self.problems.get(&s.problem) else {
            return Err(at("unknown problem id (GET /v1/problems lists them)".into()));
        };
        if s.source.trim().is_empty() {
            return Err(at("an empty source".into()));
        }
        if s.source.len() > MAX_SOURCE {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "source_too_large",
                format!("submission {i}: a source over {} MiB", MAX_SOURCE >> 20),
            ));
        }
        if s.label.as_ref().is_some_and(|l| l.chars().count() > 128) {
            return Err(at("a label over 128 characters".into()));
        }
        if s.ranked && !self.leaderboard {
            return Err(at("`ranked` is for a service in leaderboard mode".into()));
        }
        let lookup = |pass| -> anyhow::Result<Option<Known>> {
            if s.remeasure {
                return Ok(None);
            }
            match self.fleet(pass)? {
                Some(f) => self.store.cache_get(&cache_key(&f, &p.sha256, &s.source)),
                None => Ok(None),
            }
        };
        let cached = lookup(Pass::Public).map_err(ApiError::internal)?;
        let public_counts = cached
            .as_ref()
            .and_then(|k| serde_json::from_str::<Verdict>(&k.verdict).ok())
            .is_some_and(|v| v.counts());
        let ranked_cached = if s.ranked && public_counts {
            lookup(Pass::Ranked).map_err(ApiError::internal)?
        } else {
            None
        };
        let id = random_id().map_err(ApiError::internal)?;
        Ok((
            NewRow {
                id: id.clone(),
                problem: s.problem,
                source: s.source,
                label: s.label,
                ranked: s.ranked,
                remeasure: s.remeasure,
                cached,
                ranked_cached,
                public_counts,
            },
            id,
        ))
    }
}

/// Reads a submission's body, once its token is known to be good: nobody without one has a
/// byte of theirs buffered or parsed.
async fn read_request(headers: &HeaderMap, body: axum::body::Body) -> Answer<SubmitRequest> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "not_json",
            "send the body as `Content-Type: application/json`",
        ));
    }
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await
    {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "the request body is over {} MiB, or was cut off",
                    MAX_BODY >> 20
                ),
            ))
        }
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!("the request body took over {} s", BODY_TIMEOUT.as_secs()),
            ))
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                e.to_string(),
            ),
            _ => ApiError::new(StatusCode::BAD_REQUEST, "malformed_json", e.to_string()),
        }
    })
}

async fn submit(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Answer<Response> {
    let c = client(&app, &headers)?;
    let req = read_request(&headers, body).await?;
    let n = req.submissions.len();
    if n == 0 || n > MAX_BATCH {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            format!("1 to {MAX_BATCH} submissions a request, got {n}"),
        ));
    }
    c.submissions(n as u32).map_err(|w| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "over this token's submission rate",
        )
        .retry(w.retry_after_s)
    })?;
    let app2 = Arc::clone(&app);
    let rows_ids = tokio::task::spawn_blocking(move || {
        req.submissions
            .into_iter()
            .enumerate()
            .map(|(i, s)| app2.new_row(i, s))
            .collect::<Answer<Vec<_>>>()
    })
    .await
    .map_err(|e| ApiError::internal(anyhow::anyhow!("{e}")))??;
    let (rows, ids): (Vec<NewRow>, Vec<String>) = rows_ids.into_iter().unzip();
    // Answered at once from the verdict cache (public and ranked answers): counted once the
    // store has taken them.
    let cached: usize = rows
        .iter()
        .map(|r| usize::from(r.cached.is_some()) + usize::from(r.ranked_cached.is_some()))
        .sum();
    let limits = Limits {
        max_queued: c.max_queued,
        max_submissions: c.max_submissions,
        max_queue: app.max_queue,
    };
    let name = c.name.clone();
    let store = Arc::clone(&app.store);
    let taken = blocking(move || store.submit(&name, &rows, &limits, now())).await?;
    match taken {
        Ok(_) => {
            for _ in 0..cached {
                app.metrics.cache_hit();
            }
            app.wake.ring();
            Ok((StatusCode::ACCEPTED, Json(SubmitResponse { ids })).into_response())
        }
        Err(Refusal::QueueFull) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "queue_full",
            "the service's queue is full",
        )
        .retry(10)),
        Err(Refusal::OverQueued { queued, limit }) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "over_queued",
            format!("this token has {queued} submissions queued or running; its limit is {limit}"),
        )
        .retry(10)),
        Err(Refusal::QuotaExhausted { limit }) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "quota_exhausted",
            format!("this token's quota of {limit} submissions is used up"),
        )),
    }
}

/// A submission as the API shows it.
#[derive(Serialize)]
struct View {
    id: String,
    seq: i64,
    problem: String,
    label: Option<String>,
    state: String,
    cached: bool,
    ranked: bool,
    submitted_unix_s: f64,
    finished_unix_s: Option<f64>,
    verdict: Option<serde_json::Value>,
    ranked_verdict: Option<serde_json::Value>,
    record: Option<serde_json::Value>,
}

fn parsed(s: &Option<String>) -> Option<serde_json::Value> {
    s.as_deref().and_then(|t| serde_json::from_str(t).ok())
}

fn view(r: &Row) -> View {
    View {
        id: r.id.clone(),
        seq: r.seq,
        problem: r.problem.clone(),
        label: r.label.clone(),
        state: r.state.clone(),
        cached: r.cached,
        ranked: r.ranked,
        submitted_unix_s: r.submitted_s,
        finished_unix_s: r.finished_s,
        verdict: parsed(&r.verdict),
        ranked_verdict: parsed(&r.ranked_verdict),
        record: parsed(&r.record),
    }
}

/// A query string the route's parameters refuse.
fn bad_query(e: QueryRejection) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    ids: Option<String>,
    wait: Option<f64>,
    problem: Option<String>,
    state: Option<String>,
    after: Option<i64>,
    limit: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitQuery {
    wait: Option<f64>,
}

fn wait_of(w: Option<f64>) -> Answer<Duration> {
    let w = w.unwrap_or(0.0);
    if !(0.0..=MAX_WAIT_S).contains(&w) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_wait",
            format!("wait is 0 to {MAX_WAIT_S} seconds"),
        ));
    }
    Ok(Duration::from_secs_f64(w))
}

/// The rows `filter` selects, polled until every one is done or `wait` has passed.
async fn rows_waiting(
    app: &Shared,
    c: &Client,
    filter: Filter,
    wait: Duration,
) -> Answer<Vec<Row>> {
    let _waiting = if wait.is_zero() {
        None
    } else {
        Some(c.long_poll().ok_or_else(|| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_waits",
                format!(
                    "at most {} long polls of one token at once",
                    super::auth::MAX_WAITS
                ),
            )
            .retry(1)
        })?)
    };
    let client = c.name.as_str();
    let until = Instant::now() + wait;
    loop {
        let (store, name, f) = (Arc::clone(&app.store), client.to_string(), filter.clone());
        let rows = blocking(move || store.rows(&name, &f)).await?;
        if rows.iter().all(Row::is_done) || Instant::now() >= until {
            return Ok(rows);
        }
        // Answers of this process's workers land at once; other hosts' within a poll.
        tokio::time::sleep(Duration::from_millis(250).min(until - Instant::now())).await;
    }
}

#[derive(Serialize)]
struct ListResponse {
    submissions: Vec<View>,
}

async fn list(
    State(app): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Answer<Json<ListResponse>> {
    let c = client(&app, &headers)?;
    let Query(q) = q.map_err(bad_query)?;
    let wait = wait_of(q.wait)?;
    if let Some(s) = &q.state {
        if !["queued", "running", "done"].contains(&s.as_str()) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                "state is queued, running or done",
            ));
        }
    }
    let ids = match &q.ids {
        Some(text) => {
            // Each id once: a repeated one would cost a long poll's queries for nothing.
            let mut seen = std::collections::HashSet::new();
            let ids: Vec<String> = text
                .split(',')
                .filter(|s| !s.is_empty() && seen.insert(*s))
                .map(str::to_string)
                .collect();
            if ids.is_empty() || ids.len() > MAX_BATCH {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_query",
                    format!("1 to {MAX_BATCH} ids"),
                ));
            }
            Some(ids)
        }
        None => None,
    };
    if q.limit.is_some_and(|l| l == 0 || l > 1000) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            "limit is 1 to 1000",
        ));
    }
    let wait = if ids.is_some() { wait } else { Duration::ZERO };
    let order = ids.clone();
    let filter = Filter {
        ids,
        problem: q.problem,
        state: q.state,
        after: q.after,
        limit: q.limit,
    };
    let mut rows = rows_waiting(&app, c, filter, wait).await?;
    if let Some(order) = order {
        let pos: BTreeMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        rows.sort_by_key(|r| pos.get(r.id.as_str()).copied());
    }
    Ok(Json(ListResponse {
        submissions: rows.iter().map(view).collect(),
    }))
}

async fn one(
    State(app): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<WaitQuery>, QueryRejection>,
) -> Answer<Json<View>> {
    let c = client(&app, &headers)?;
    let Query(q) = q.map_err(bad_query)?;
    let wait = wait_of(q.wait)?;
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no submission of this token has that id",
        )
    };
    if id.len() > 64 {
        return Err(not_found());
    }
    let filter = Filter {
        ids: Some(vec![id]),
        ..Filter::default()
    };
    let rows = rows_waiting(&app, c, filter, wait).await?;
    rows.first().map(|r| Json(view(r))).ok_or_else(not_found)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportQuery {
    format: Option<String>,
}

async fn export(
    State(app): State<Shared>,
    headers: HeaderMap,
    q: Result<Query<ExportQuery>, QueryRejection>,
) -> Answer<Response> {
    let c = client(&app, &headers)?;
    let Query(q) = q.map_err(bad_query)?;
    let format = q.format.unwrap_or_else(|| "jsonl".into());
    let (store, name) = (Arc::clone(&app.store), c.name.clone());
    let lines = blocking(move || board::client_records(store.as_ref(), &name)).await?;
    let (kind, text) = match format.as_str() {
        "jsonl" => (
            "application/x-ndjson",
            lines.iter().map(|l| format!("{l}\n")).collect(),
        ),
        "csv" | "markdown" => {
            let report = board::report_of(&c.name, &lines);
            if format == "csv" {
                ("text/csv", kbench_reports::export::render_csv(&report))
            } else {
                (
                    "text/markdown",
                    kbench_reports::export::render_markdown(&report),
                )
            }
        }
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                "format is jsonl, csv or markdown",
            ))
        }
    };
    Ok(([(header::CONTENT_TYPE, kind)], text).into_response())
}

#[derive(Serialize)]
struct ProblemList<'a> {
    problems: Vec<&'a ProblemInfo>,
}

async fn problems(State(app): State<Shared>, headers: HeaderMap) -> Answer<Response> {
    client(&app, &headers)?;
    Ok(Json(ProblemList {
        problems: app.problems.values().collect(),
    })
    .into_response())
}

#[derive(Serialize)]
struct Health {
    status: &'static str,
    version: &'static str,
    queued: u64,
    running: u64,
}

async fn health(State(app): State<Shared>) -> Answer<Json<Health>> {
    let store = Arc::clone(&app.store);
    let c = blocking(move || store.counts()).await?;
    Ok(Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
        queued: c.queued,
        running: c.running,
    }))
}

async fn metrics(State(app): State<Shared>) -> Response {
    let store = Arc::clone(&app.store);
    let counts = blocking(move || store.counts()).await.ok();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(counts),
    )
        .into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

fn not_leaderboard() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_leaderboard",
        "this service is not in leaderboard mode",
    )
}

async fn board_json(State(app): State<Shared>, headers: HeaderMap) -> Answer<Response> {
    client(&app, &headers)?;
    if !app.leaderboard {
        return Err(not_leaderboard());
    }
    let a = Arc::clone(&app);
    let b = blocking(move || board::board(a.store.as_ref(), a.problems.keys().cloned().collect()))
        .await?;
    Ok(Json(b).into_response())
}

async fn board_page(State(app): State<Shared>) -> Answer<Response> {
    if !app.leaderboard {
        return Err(not_leaderboard());
    }
    let a = Arc::clone(&app);
    let page = blocking(move || a.board.page(a.store.as_ref(), &a.title)).await?;
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response())
}

fn handler(method: &str, path: &str) -> MethodRouter<Shared> {
    match (method, path) {
        ("POST", "/v1/submissions") => post(submit),
        ("GET", "/v1/submissions") => get(list),
        ("GET", "/v1/submissions/{id}") => get(one),
        ("GET", "/v1/export") => get(export),
        ("GET", "/v1/problems") => get(problems),
        ("GET", "/v1/leaderboard") => get(board_json),
        ("GET", "/leaderboard") => get(board_page),
        ("GET", "/v1/health") => get(health),
        ("GET", "/metrics") => get(metrics),
        ("GET", "/openapi.json") => get(openapi),
        _ => unreachable!("ROUTES lists {method} {path} without a handler"),
    }
}

/// The service's router: [`ROUTES`], bodies bounded, every response timed.
pub(crate) fn router(app: Shared) -> Router {
    let mut r = Router::new();
    for (method, path) in ROUTES {
        r = r.route(path, handler(method, path));
    }
    let metrics = Arc::clone(&app.metrics);
    r.fallback(|| async {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no_route",
            "no such route (GET /openapi.json lists them)",
        )
    })
    .method_not_allowed_fallback(|| async {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this route does not take that method",
        )
    })
    .layer(DefaultBodyLimit::max(MAX_BODY))
    .layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let metrics = Arc::clone(&metrics);
            async move {
                let t = Instant::now();
                // A long poll's time is its wait, not the service's: kept out of the quantiles.
                let long_poll = req.uri().query().is_some_and(|q| {
                    q.split('&').any(|kv| {
                        kv.strip_prefix("wait=")
                            .is_some_and(|w| w.parse::<f64>().is_ok_and(|w| w > 0.0))
                    })
                });
                // Every stage has its limit: the longest long poll and a margin.
                let r = match tokio::time::timeout(
                    Duration::from_secs_f64(MAX_WAIT_S + 15.0),
                    next.run(req),
                )
                .await
                {
                    Ok(r) => r,
                    Err(_) => ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "timeout",
                        "the request took too long",
                    )
                    .into_response(),
                };
                metrics.response(
                    r.status().as_u16(),
                    (!long_poll).then(|| t.elapsed().as_secs_f64()),
                );
                r
            }
        },
    ))
    .with_state(app)
}
