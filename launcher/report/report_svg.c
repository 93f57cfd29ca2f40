/* report_svg.c - line charts as inline SVG for `dtrain report` (see report.h).
 *
 * Geometry: a 640x280 viewBox, the plot inside margins (left 64, right 16,
 * top 34, bottom 36).  x is the optimizer step, y the value, both linear with
 * "nice" ticks (1, 2 or 5 times a power of ten).  A series is one
 * <polyline class="curve" data-series="NAME">, split where a value is NaN
 * (a null in metrics.jsonl) so a gap is not bridged; series of few points
 * (evaluations) also get a dot per point.  Values beyond +-1e150 are drawn as
 * gaps too: only a garbled file holds them, and the axis arithmetic on them
 * would overflow.  Not for the page around the chart.
 */
#include "launcher/report/report.h"

#include <math.h>
#include <string.h>

#define W 640.0
#define H 280.0
#define ML 64.0
#define MR 16.0
#define MT 34.0
#define MB 36.0
#define MAX_VALUE 1e150
/* a nice step gives at most 9 ticks on an axis; more means it did not advance */
#define MAX_TICKS 12

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

struct frame {
    double x0, x1, y0, y1;
};

static double px(const struct frame *fr, double x)
{
    return ML + (x - fr->x0) / (fr->x1 - fr->x0) * (W - ML - MR);
}

static double py(const struct frame *fr, double y)
{
    return H - MB - (y - fr->y0) / (fr->y1 - fr->y0) * (H - MT - MB);
}

/* 1, 2 or 5 times a power of ten, near range / 5. */
static double nice_step(double range)
{
    double raw = range / 5, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static bool drawn(double x, double y)
{
    return fabs(x) <= MAX_VALUE && fabs(y) <= MAX_VALUE; /* false for NaN too */
}

/* Data bounds over the series drawn; false if no point is drawn.  Each axis
 * ends up wider than 0 so px() and py() divide by something: x + 1 is x
 * itself beyond 2^53, and 10% of a subnormal y is 0. */
static bool bounds(const struct dt_report_series *const *s, int n, struct frame *fr)
{
    bool any = false;
    *fr = (struct frame){INFINITY, -INFINITY, INFINITY, -INFINITY};
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < s[i]->n; k++) {
            double x = s[i]->step[k], y = s[i]->value[k];
            if (!drawn(x, y))
                continue;
            any = true;
            fr->x0 = fmin(fr->x0, x);
            fr->x1 = fmax(fr->x1, x);
            fr->y0 = fmin(fr->y0, y);
            fr->y1 = fmax(fr->y1, y);
        }
    if (!any)
        return false;
    if (fr->x1 == fr->x0)
        fr->x1 = fr->x0 + fmax(1, fabs(fr->x0) * 1e-9);
    if (fr->y1 == fr->y0) {
        double pad = fr->y0 != 0 ? fabs(fr->y0) * 0.1 : 1;
        fr->y0 -= pad;
        fr->y1 += pad;
    }
    if (fr->y1 == fr->y0) {
        fr->y0 -= 1;
        fr->y1 += 1;
    }
    double pad = (fr->y1 - fr->y0) * 0.05;
    fr->y0 -= pad;
    fr->y1 += pad;
    return true;
}

/* Tick text: whole numbers for large values (12600, not 1.26e+04). */
static const char *tick(char *buf, size_t size, double v, double step)
{
    if (fabs(v) < step * 1e-9)
        v = 0;
    snprintf(buf, size, fabs(v) >= 1e4 && fabs(v) < 1e12 ? "%.0f" : "%.4g", v);
    return buf;
}

/* The multiples of step in [lo, hi], at most MAX_TICKS: counted rather than
 * stepped to hi, since lo + step == lo when step is below lo's precision. */
static int ticks(double lo, double hi, double step, double *at)
{
    int n = 0;
    double first = ceil(lo / step) * step;
    for (int i = 0; n < MAX_TICKS; i++) {
        double v = first + i * step;
        if (!(v <= hi) || (n > 0 && !(v > at[n - 1])))
            break;
        at[n++] = v;
    }
    return n;
}

static void axes(FILE *f, const struct frame *fr)
{
    char t[32];
    fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" class=\"plot\"/>\n", ML, MT, W - ML - MR,
            H - MT - MB);
    double ys = nice_step(fr->y1 - fr->y0), xs = nice_step(fr->x1 - fr->x0), at[MAX_TICKS];
    xs = xs < 1 ? 1 : xs; /* steps are integers */
    for (int i = 0, n = ticks(fr->y0, fr->y1, ys, at); i < n; i++) {
        double y = at[i];
        fprintf(f, "<line class=\"grid\" x1=\"%g\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\"/>"
                   "<text class=\"tick\" x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                ML, W - MR, py(fr, y), py(fr, y), ML - 4, py(fr, y) + 4, tick(t, sizeof t, y, ys));
    }
    for (int i = 0, n = ticks(fr->x0, fr->x1, xs, at); i < n; i++) {
        double x = at[i];
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", px(fr, x),
                H - MB + 16, tick(t, sizeof t, x, xs));
    }
    fprintf(f, "<text class=\"axis\" x=\"%g\" y=\"%g\" text-anchor=\"middle\">step</text>\n", (ML + W - MR) / 2,
            H - 4);
}

/* One series: polylines broken at NaN, dots when there are few points. */
static void curve(FILE *f, const struct frame *fr, const struct dt_report_series *s, const char *color)
{
    bool open = false;
    for (size_t k = 0; k < s->n; k++) {
        bool ok = drawn(s->step[k], s->value[k]);
        if (ok && !open)
            fprintf(f, "<polyline class=\"curve\" data-series=\"%s\" stroke=\"%s\" points=\"", s->name, color);
        else if (!ok && open)
            fputs("\"/>\n", f);
        open = ok;
        if (ok)
            fprintf(f, "%.1f,%.1f ", px(fr, s->step[k]), py(fr, s->value[k]));
    }
    if (open)
        fputs("\"/>\n", f);
    if (s->n > 40)
        return;
    for (size_t k = 0; k < s->n; k++)
        if (drawn(s->step[k], s->value[k]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s at step %.0f: %.6g</title>"
                       "</circle>\n", px(fr, s->step[k]), py(fr, s->value[k]), color, s->name, s->step[k],
                    s->value[k]);
}

int dt_report_svg_chart(FILE *f, const struct dt_report *r, const char *title, const char *const *names, int n_names)
{
    const struct dt_report_series *s[8];
    int n = 0;
    for (int i = 0; i < n_names && n < 8; i++)
        if ((s[n] = dt_report_series(r, names[i])))
            n++;
    struct frame fr;
    if (n == 0 || !bounds(s, n, &fr))
        return 0;
    fprintf(f, "<svg class=\"chart\" viewBox=\"0 0 %g %g\" width=\"%g\" height=\"%g\" "
               "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"%s\">\n", W, H, W, H, title);
    fprintf(f, "<text class=\"title\" x=\"%g\" y=\"18\">%s</text>\n", ML, title);
    axes(f, &fr);
    /* legend, right-aligned in the top margin; below the title when both do not fit on
     * one line (about 7 px per character of legend, 7.5 of the bold title) */
    double lx = W - MR, width = 0;
    for (int i = 0; i < n; i++)
        width += 14 + 7.0 * (double)strlen(s[i]->name);
    int y = lx - width < ML + 7.5 * (double)strlen(title) + 12 ? 30 : 18;
    for (int i = n - 1; i >= 0; i--) {
        const char *c = colors[i % 6];
        lx -= 14 + 7.0 * (double)strlen(s[i]->name);
        fprintf(f, "<rect x=\"%.0f\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                   "<text class=\"legend\" x=\"%.0f\" y=\"%d\">%s</text>\n", lx, y - 9, c, lx + 13, y, s[i]->name);
    }
    for (int i = 0; i < n; i++)
        curve(f, &fr, s[i], colors[i % 6]);
    fputs("</svg>\n", f);
    return n;
}
