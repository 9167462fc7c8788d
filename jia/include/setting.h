/* setting.h: JIAJIA 3.0 programs include this internal header of JIAJIA's for its public interface
 * only; here it is jia.h. */
#ifndef JIA_COMPAT_SETTING_H
#define JIA_COMPAT_SETTING_H
#include "jia.h"
#endif
